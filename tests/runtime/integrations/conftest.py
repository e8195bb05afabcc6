from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def ip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A real IPython shell with ``%load_ext alchemist`` done, a clean namespace, and the
    notebook's folder a fresh one (what the libraries write lands there, not in the repo)."""
    from IPython.testing.globalipapp import get_ipython

    folder = tmp_path / "notebook"
    folder.mkdir()
    monkeypatch.chdir(folder)
    shell = get_ipython()
    shell.reset()
    shell.run_line_magic("load_ext", "alchemist")
    yield shell
    shell.reset()
