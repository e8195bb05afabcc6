"""The Kubernetes backend (``backend="kubernetes"``); needs the ``kubernetes`` client.

See ``docs/kubernetes.md`` for the objects it creates and its configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from alchemist._lazy import lazy_exports

if TYPE_CHECKING:
    from alchemist.backends.kubernetes.backend import KubernetesBackend
    from alchemist.backends.kubernetes.config import ENV_VARS, KubernetesConfig
    from alchemist.backends.kubernetes.manifests import Settings, make_manifests

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "KubernetesBackend": "alchemist.backends.kubernetes.backend",
        "ENV_VARS": "alchemist.backends.kubernetes.config",
        "KubernetesConfig": "alchemist.backends.kubernetes.config",
        "Settings": "alchemist.backends.kubernetes.manifests",
        "make_manifests": "alchemist.backends.kubernetes.manifests",
    },
)


__all__ = ["ENV_VARS", "KubernetesBackend", "KubernetesConfig", "Settings", "make_manifests"]
