"""The local backend: a job is a detached process group on this machine."""

from alchemist.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
