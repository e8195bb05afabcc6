"""Fixtures of these tests: a real IPython shell with the extension loaded."""

from tests.support.ipython import ip  # noqa: F401 - a fixture, used by name
