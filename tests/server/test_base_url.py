"""The API mounts under the server's base URL, as behind JupyterHub (``/user/<name>/``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.jobs import make_record


@pytest.fixture
def jp_base_url() -> str:
    return "/user/alice/"


async def test_routes_live_under_the_base_url(jp_fetch: Any, jp_base_url: str) -> None:
    record, _ = make_record(name="hubjob")
    response = await jp_fetch("alchemist", "api", "v1", "jobs", record.id)
    assert response.effective_url.split("?")[0].endswith(
        f"{jp_base_url}alchemist/api/v1/jobs/{record.id}"
    )
    assert json.loads(response.body)["name"] == "hubjob"
