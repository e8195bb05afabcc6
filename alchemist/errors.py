"""Domain exceptions. Each message is one line that names the fix.

Library errors are translated into these at the boundary (``raise ... from e``); the
magics turn any :class:`AlchemistError` into an IPython ``UsageError`` so a user mistake
never shows a traceback.
"""

from __future__ import annotations


class AlchemistError(Exception):
    """Base class of every error a user can cause or must act on."""


class SpecError(AlchemistError, ValueError):
    """A job spec field is invalid (the message names the field)."""


class BundleError(AlchemistError):
    """The cell cannot be shipped to workers (syntax error, unpicklable or oversized value)."""


class BackendError(AlchemistError):
    """The backend refused or failed an operation (the message says what to do)."""


class UnknownBackendError(BackendError):
    """No backend is registered under the requested name."""


class JobNotFoundError(AlchemistError, KeyError):
    """No job with this id exists for the current user."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want the plain line
        return str(self.args[0]) if self.args else "job not found"


class PermissionDeniedError(AlchemistError):
    """The job exists but belongs to another user."""


class CursorError(AlchemistError, ValueError):
    """A metrics cursor that no read returned (the message says what a cursor looks like)."""


class CapacityError(AlchemistError):
    """The job asks for more than its backend can ever give (a user's mistake, not the
    backend's: the message says what to lower)."""


class HubConfigError(AlchemistError, ValueError):
    """A hub setting is invalid: an ``ALCHEMIST_HUB_*`` variable of the embedded hub or a
    chart value of the Kubernetes hub (the message names the variable or key and the fix)."""


class CheckpointError(AlchemistError):
    """A checkpoint cannot be loaded as asked (the message names the file, what stopped
    the load and the fix)."""


class IntegrationError(AlchemistError):
    """A training library is used in a job in a way that cannot work there (a second
    launcher, a device count that is not the job's): the message says what to change."""
