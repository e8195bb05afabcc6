"""The ``ip`` fixture: a real IPython shell with ``%load_ext alchemist`` done (shared by
the magics, runtime, backend and diagnosis tests through their conftest files)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def ip() -> Iterator[Any]:
    """A real IPython shell with ``%load_ext alchemist`` done and a clean namespace."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.reset()
    shell.run_line_magic("load_ext", "alchemist")
    yield shell
    shell.reset()
