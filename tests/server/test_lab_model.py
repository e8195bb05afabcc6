"""The panel model's TypeScript unit tests (node's test runner), run from the suite.

They live in ``extensions/lab/test/``; this runs them so that ``pytest`` covers them.
Needs the node dependencies that ``scripts/setup.d/60-labextension.sh`` installs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[2] / "extensions" / "lab"
VENV_BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"


def test_panel_model_unit_tests_pass() -> None:
    if not (LAB / "node_modules" / "typescript").is_dir():
        pytest.skip("node dependencies missing: run scripts/setup.d/60-labextension.sh")
    if shutil.which("node") is None:
        pytest.skip("node missing: install Node.js 18+")
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        ["jlpm", "test"], cwd=LAB, env=env, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout
