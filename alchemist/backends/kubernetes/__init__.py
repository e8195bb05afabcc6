"""The Kubernetes backend (``backend="kubernetes"``); needs the ``kubernetes`` client.

See ``docs/kubernetes.md`` for the objects it creates and its configuration.
"""

from __future__ import annotations

from alchemist.backends.kubernetes.backend import KubernetesBackend
from alchemist.backends.kubernetes.config import ENV_VARS, KubernetesConfig
from alchemist.backends.kubernetes.manifests import Settings, make_manifests

__all__ = ["ENV_VARS", "KubernetesBackend", "KubernetesConfig", "Settings", "make_manifests"]
