"""Helpers of the chart tests: find the real Helm binary and render the chart.

Helm comes from ``scripts/setup.d/30-helm.sh`` (``.cache/bin/helm``); a ``helm`` on PATH
is used otherwise.
"""

from __future__ import annotations

import copy
import functools
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "alchemist"
ALL_ON_VALUES = REPO / "tests" / "helm" / "values-all-on.yaml"
SHARED_VALUES = REPO / "tests" / "helm" / "values-shared.yaml"


def find_helm() -> str | None:
    """The Helm binary the setup step installs, else one on PATH."""
    local = REPO / ".cache" / "bin" / "helm"
    if local.is_file():
        return str(local)
    return shutil.which("helm")


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``helm ARGS`` offline and capture its output (never raises on failure)."""
    return subprocess.run(
        [helm, *args], capture_output=True, text=True, timeout=60, check=False, cwd=REPO
    )


def render(
    helm: str,
    values_files: Sequence[Path] = (),
    sets: Sequence[str] = (),
    namespace: str = "alchemist",
    release: str = "demo",
) -> list[dict[str, Any]]:
    """``helm template`` the chart and return (a fresh copy of) the rendered objects.

    Renders of the same arguments are cached for the session, except those whose output
    is random by design (generated secrets): callers that compare two renders pass
    ``sets`` that differ, or call :func:`render_uncached`.

    Raises:
        AssertionError: With Helm's own message if rendering fails.
    """
    return copy.deepcopy(
        _render_cached(helm, tuple(map(str, values_files)), tuple(sets), namespace, release)
    )


@functools.cache
def _render_cached(
    helm: str, values_files: tuple[str, ...], sets: tuple[str, ...], namespace: str, release: str
) -> list[dict[str, Any]]:
    return render_uncached(helm, values_files, sets, namespace, release)


def render_uncached(
    helm: str,
    values_files: Sequence[str | Path] = (),
    sets: Sequence[str] = (),
    namespace: str = "alchemist",
    release: str = "demo",
) -> list[dict[str, Any]]:
    """Like :func:`render`, always running Helm."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    for f in values_files:
        args += ["--values", str(f)]
    for s in sets:
        args += ["--set", s]
    proc = run_helm(helm, *args)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def find(docs: list[dict[str, Any]], kind: str, name_suffix: str = "") -> list[dict[str, Any]]:
    """The rendered objects of ``kind`` whose name ends with ``name_suffix``."""
    return [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]


def run_hub_config(docs: list[dict[str, Any]], directory: Path) -> dict[str, Any]:
    """Run the chart's rendered ``jupyterhub_config.py`` as JupyterHub runs it: the hub
    ConfigMap's files written to ``directory`` (the file pointed at its hub-config.yaml
    there instead of the pod's mount), executed with a fresh traitlets ``c``.

    Returns:
        The file's globals: ``c``, ``hub_config`` and what the file defines.
    """
    from traitlets.config import Config

    (cm,) = find(docs, "ConfigMap", "-hub-config")
    for name, text in cm["data"].items():
        if name != "jupyterhub_config.py":
            (directory / name).write_text(text)
    source = cm["data"]["jupyterhub_config.py"].replace(
        "/usr/local/etc/alchemist/hub-config.yaml", str(directory / "hub-config.yaml")
    )
    scope: dict[str, Any] = {"c": Config(), "__name__": "jupyterhub_config"}
    exec(compile(source, str(directory / "jupyterhub_config.py"), "exec"), scope)
    return scope
