"""JupyterHub on Kubernetes: KubeSpawner profiles and configuration from chart values.

The chart in ``helm/alchemist`` runs a hub whose ``jupyterhub_config.py`` calls
:func:`configure_from_file`; the same functions can be called from any
``jupyterhub_config.py`` that uses KubeSpawner. The embedded one-machine hub is
:mod:`alchemist.hub.embedded` and does not use this package.
"""

from __future__ import annotations

from alchemist.hub.kubernetes.config import (
    DEFAULT_CONFIG_PATH,
    backend_environment,
    configure_from_file,
    configure_hub,
    configure_kubespawner,
    load_config_file,
    make_volumes,
)
from alchemist.hub.kubernetes.profiles import (
    DEFAULT_GPU_RESOURCE,
    DEFAULT_PROFILES,
    HubConfigError,
    Profile,
    make_profile_list,
    profile_from_values,
)

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_GPU_RESOURCE",
    "DEFAULT_PROFILES",
    "HubConfigError",
    "Profile",
    "backend_environment",
    "configure_from_file",
    "configure_hub",
    "configure_kubespawner",
    "load_config_file",
    "make_profile_list",
    "make_volumes",
    "profile_from_values",
]
