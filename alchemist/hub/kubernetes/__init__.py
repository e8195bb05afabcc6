"""JupyterHub on Kubernetes: KubeSpawner profiles and configuration from chart values.

The chart in ``helm/alchemist`` runs a hub whose ``jupyterhub_config.py`` calls
:func:`configure_from_file`; the same functions can be called from any
``jupyterhub_config.py`` that uses KubeSpawner. The embedded one-machine hub is
:mod:`alchemist.hub.embedded` and does not use this package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alchemist._lazy import lazy_exports

if TYPE_CHECKING:
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

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "DEFAULT_CONFIG_PATH": "alchemist.hub.kubernetes.config",
        "backend_environment": "alchemist.hub.kubernetes.config",
        "configure_from_file": "alchemist.hub.kubernetes.config",
        "configure_hub": "alchemist.hub.kubernetes.config",
        "configure_kubespawner": "alchemist.hub.kubernetes.config",
        "load_config_file": "alchemist.hub.kubernetes.config",
        "make_volumes": "alchemist.hub.kubernetes.config",
        "DEFAULT_GPU_RESOURCE": "alchemist.hub.kubernetes.profiles",
        "DEFAULT_PROFILES": "alchemist.hub.kubernetes.profiles",
        "HubConfigError": "alchemist.hub.kubernetes.profiles",
        "Profile": "alchemist.hub.kubernetes.profiles",
        "make_profile_list": "alchemist.hub.kubernetes.profiles",
        "profile_from_values": "alchemist.hub.kubernetes.profiles",
    },
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
