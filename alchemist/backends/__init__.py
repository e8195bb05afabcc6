"""Backends, looked up by name and imported lazily.

``get_backend("kubernetes")`` imports the Kubernetes backend only when asked, so the
``kubernetes`` client stays an optional dependency. Third parties can add a backend
with the ``alchemist.backends`` entry-point group.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from alchemist.backends.api import Backend, DryRunInfo, JobRequest, LogChunk
from alchemist.errors import UnknownBackendError

_BUILTIN = {
    "local": "alchemist.backends.local:LocalBackend",
    "kubernetes": "alchemist.backends.kubernetes:KubernetesBackend",
}

_instances: dict[str, Backend] = {}
_registered: set[str] = set()


def backend_names() -> list[str]:
    names = set(_BUILTIN) | _registered
    names.update(ep.name for ep in entry_points(group="alchemist.backends"))
    return sorted(names)


def register_backend(name: str, backend: Backend | None) -> None:
    """Make ``backend`` the one :func:`get_backend` returns for ``name`` (None: forget
    it). For tests and embedding; installed backends use the entry-point group."""
    if backend is None:
        _instances.pop(name, None)
        _registered.discard(name)
    else:
        _instances[name] = backend
        _registered.add(name)


def get_backend(name: str) -> Backend:
    """Return the (shared) backend instance registered as ``name``.

    Raises:
        UnknownBackendError: no backend has that name, or its dependencies are missing.
    """
    if name in _instances:
        return _instances[name]
    target = _BUILTIN.get(name)
    if target is None:
        eps = [ep for ep in entry_points(group="alchemist.backends") if ep.name == name]
        if not eps:
            raise UnknownBackendError(
                f"unknown backend {name!r}; available: {', '.join(backend_names())}"
            )
        target = eps[0].value
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UnknownBackendError(
            f"backend {name!r} needs a package that is not installed ({e.name}):"
            f" pip install 'jupyter-alchemist[{name}]'"
        ) from e
    backend = getattr(module, attr)()
    _instances[name] = backend
    return backend


__all__ = [
    "Backend",
    "DryRunInfo",
    "JobRequest",
    "LogChunk",
    "backend_names",
    "get_backend",
    "register_backend",
]
