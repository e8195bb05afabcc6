"""Fixtures of the interactive-mode tests: real ipyparallel engines through Alchemist."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def started(alchemist_home: Path) -> Iterator[Any]:
    """``started(workers=2, **options)``: start a session, stopped at the test's end
    (before the home's process check)."""
    from alchemist.interactive import session

    made: list[Any] = []

    def start(workers: int = 2, **options: Any) -> Any:
        options.setdefault("start_timeout", 120)
        s = session(workers, **options)
        made.append(s)
        return s

    yield start
    for s in made:
        s.stop()


@pytest.fixture
def ip() -> Iterator[Any]:
    """A real IPython shell with ``%load_ext alchemist`` done and a clean namespace."""
    from IPython.testing.globalipapp import get_ipython

    from alchemist.interactive import current_session

    shell = get_ipython()
    shell.reset()
    shell.run_line_magic("load_ext", "alchemist")
    yield shell
    s = current_session()
    if s is not None:
        s.stop()
    shell.reset()


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    """Poll ``predicate`` until true; fail naming ``what`` after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
