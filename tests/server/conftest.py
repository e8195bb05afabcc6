"""Fixtures for the REST handler tests: a real Jupyter server with the extension on.

pytest-jupyter's fixtures (``jp_serverapp``, ``jp_fetch``, ...) run a real
``jupyter_server.ServerApp`` in this process; requests go over real HTTP.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403  (fixtures and hooks)

from tests.support.jobs import USER, Api


@pytest.fixture  # type: ignore[no-redef]  # replaces pytest-jupyter's fixture
def jp_server_config() -> dict[str, Any]:
    # jupyter-server-proxy too, as in a real install: TensorBoard is reached through it.
    return {
        "ServerApp": {
            "jpserver_extensions": {"alchemist.server": True, "jupyter_server_proxy": True}
        }
    }


@pytest.fixture(autouse=True)
def hub_user(monkeypatch: pytest.MonkeyPatch) -> str:
    """The server's user, as JupyterHub's single-user server exports it."""
    monkeypatch.setenv("JUPYTERHUB_USER", USER)
    return USER


def _not_json(word: str) -> Any:
    raise AssertionError(f"the reply holds {word}, which is not JSON (no JSON parser reads it)")


def strict_json(text: str) -> Any:
    """``text`` parsed as JSON parsers other than Python's read it (the panel's
    ``JSON.parse``): the bare words ``NaN`` and ``Infinity`` fail the test."""
    return json.loads(text, parse_constant=_not_json)


@pytest.fixture
def api(jp_fetch: Any) -> Api:
    """``await api("GET", "jobs", params=..., body=...)`` → ``(status, json)``; every
    reply must be strict JSON."""

    async def call(
        method: str,
        *parts: str,
        params: dict[str, Any] | None = None,
        body: Any = None,
        raw_body: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        kwargs: dict[str, Any] = {"method": method, "raise_error": False}
        if params:
            kwargs["params"] = params
        if headers:
            kwargs["headers"] = headers
        if raw_body is not None:
            kwargs["body"] = raw_body
        elif body is not None:
            kwargs["body"] = json.dumps(body)
        elif method in ("POST", "PUT", "PATCH"):
            kwargs["body"] = "{}"
        response = await jp_fetch("alchemist", "api", "v1", *parts, **kwargs)
        text = response.body.decode() if response.body else ""
        assert response.headers.get("Content-Type", "").startswith("application/json"), text
        return response.code, strict_json(text) if text else None

    return call


@pytest.fixture
def root(jp_root_dir: Path) -> Path:
    """The Jupyter server's root directory (where submitted paths are resolved)."""
    return Path(jp_root_dir)
