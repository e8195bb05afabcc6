"""The Alchemist Jupyter server extension: the REST API behind the JupyterLab panel.

Installing the package enables it (``jupyter-config/jupyter_server_config.d/alchemist.json``
ships in the wheel); by hand: ``jupyter server extension enable alchemist.server``.
The routes live under ``<base_url>alchemist/api/v1/`` (see :mod:`alchemist.server.handlers`).
"""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING, Any

from alchemist._lazy import lazy_exports

if TYPE_CHECKING:
    from alchemist.server.handlers import API_ROOT, setup_handlers

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "API_ROOT": "alchemist.server.handlers",
        "setup_handlers": "alchemist.server.handlers",
    },
)


__all__ = [
    "API_ROOT",
    "_jupyter_server_extension_points",
    "_load_jupyter_server_extension",
    "setup_handlers",
]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """Where jupyter_server finds this extension (its loader is in this module)."""
    return [{"module": "alchemist.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Register the REST routes, and the jobs' TensorBoard route, on the server's web
    application.

    Args:
        serverapp: the running ``jupyter_server.serverapp.ServerApp``.
    """
    from alchemist.server.handlers import API_ROOT, setup_handlers
    from alchemist.server.proxy import setup_proxy_routes

    setup_handlers(serverapp.web_app)
    setup_proxy_routes(serverapp)
    base_url = serverapp.web_app.settings.get("base_url", "/")
    serverapp.log.info("Alchemist REST API at %s%s", base_url, API_ROOT)
    atexit.register(_stop_warm_pool)


def _stop_warm_pool() -> None:
    """When the user's server stops (logout, the hub culling it, the hub stopping), so
    does the user's warm pool: it holds about 0.5 GB (two processes that imported
    torch), and nothing of the user's is left to use it soon. Running ranks go on; a later job starts a new pool."""
    try:
        from alchemist.backends.local.pool import client

        client.stop(timeout=5)
    except Exception:  # an exiting server has no one to tell
        pass
