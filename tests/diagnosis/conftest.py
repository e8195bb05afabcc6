"""Fixtures of the diagnosis tests: the IPython shell of the core tests, and the real
Jupyter server with the extension (and its ``api`` caller) of the server tests."""

from __future__ import annotations

from pytest_jupyter.jupyter_server import *  # noqa: F403  (fixtures and hooks)

from tests.server.conftest import api, hub_user, jp_server_config, root  # noqa: F401
from tests.support.ipython import ip  # noqa: F401 - fixtures, used by name
