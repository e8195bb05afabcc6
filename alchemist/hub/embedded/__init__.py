"""The embedded, one-machine JupyterHub (``python -m alchemist.hub.embedded``).

A real JupyterHub on 127.0.0.1 behind configurable-http-proxy, with password log-in
(jupyterhub-nativeauthenticator), one local JupyterLab server per user with Alchemist
loaded, and per-user job stores. See ``docs/hub.md``. The Kubernetes deployment's
helpers are in :mod:`alchemist.hub.kubernetes`, not here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alchemist._lazy import lazy_exports

if TYPE_CHECKING:
    from alchemist.errors import HubConfigError
    from alchemist.hub.embedded.settings import HubSettings

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "HubConfigError": "alchemist.errors",
        "HubSettings": "alchemist.hub.embedded.settings",
    },
)


__all__ = ["HubConfigError", "HubSettings"]
