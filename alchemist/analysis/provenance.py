"""What a result was measured with: package versions, the git commit, the CPU."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

PACKAGES = ("jupyter-alchemist", "torch", "numpy", "scipy", "scikit-learn", "pandas", "horovod")


def _git(*args: str, cwd: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, else platform's guess)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def provenance(packages: tuple[str, ...] = PACKAGES, repo: Path | None = None) -> dict[str, Any]:
    """A JSON-ready record of the environment a notebook ran in.

    Contains the UTC time, Python's version, each package's installed version (None
    when not installed), the git commit of ``repo`` (default: this package's checkout)
    and whether its tracked files had uncommitted changes, the CPU model, the core count
    and the 1-minute load average.
    """
    repo = repo or Path(__file__).resolve().parents[2]
    versions: dict[str, str | None] = {}
    for name in packages:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    status = _git("status", "--porcelain", "--untracked-files=no", cwd=repo)
    return {
        "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": versions,
        "commit": _git("rev-parse", "HEAD", cwd=repo),
        "dirty": bool(status) if status is not None else None,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def describe(p: dict[str, Any]) -> str:
    """One paragraph for a notebook's output."""
    pk = ", ".join(f"{k} {v}" for k, v in p["packages"].items() if v)
    commit = (p["commit"] or "unknown")[:12] + (" (with uncommitted changes)" if p["dirty"] else "")
    return (
        f"Run {p['utc']} on {p['cpu']} ({p['cores']} cores, load {p['load_1min']:.1f}),"
        f" Python {p['python']}, {pk}; commit {commit}."
    )


def write_data(path: str | Path, data: dict[str, Any]) -> Path:
    """Write ``data`` with a ``provenance`` entry as indented JSON (NaN becomes null)."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and x != x:
            return None
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        if hasattr(x, "item") and not isinstance(x, (str, bytes)):
            return clean(x.item())
        return x

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"provenance": provenance(), **data}
    path.write_text(json.dumps(clean(payload), indent=1) + "\n")
    return path
