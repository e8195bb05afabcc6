"""JupyterHub for Alchemist, in two flavours.

- :mod:`alchemist.hub.embedded`: the one-machine hub (``alchemist-hub start`` or
  ``python -m alchemist.hub.embedded``): JupyterHub on 127.0.0.1 with password log-in and
  one local JupyterLab server per user. Its ``jupyterhub_config.py`` is package data.
- :mod:`alchemist.hub.kubernetes`: KubeSpawner profiles and hub configuration from the
  Helm chart's values (``helm/alchemist``).

Both raise :class:`~alchemist.errors.HubConfigError` for a bad setting. This package
imports neither subpackage, so the hub image (no torch, no kubernetes client) and the
embedded hub each load only what they use.
"""

from __future__ import annotations

from alchemist.errors import HubConfigError

__all__ = ["HubConfigError"]
