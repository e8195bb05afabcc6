"""Where Alchemist keeps its state, read from the environment.

``ALCHEMIST_HOME`` (default ``~/.alchemist``) holds the SQLite job store and the job
directories; when Alchemist creates it, or its ``jobs`` folder, it is made 0700 (the
owner's alone). On Kubernetes it is the shared volume, mounted at the same path in the
notebook pod and in every worker pod. ``ALCHEMIST_DB_URL`` selects another SQLAlchemy
database (PostgreSQL in production; see :mod:`alchemist.store` for where an SQLite
index may live). ``ALCHEMIST_MAX_VALUE_BYTES`` bounds the size of a
notebook value shipped with a cell (default 100 MB); ``ALCHEMIST_MAX_DATA_BYTES`` the
files of the notebook's folder shipped to workers that cannot see it, Kubernetes pods
(default 100 MB, see :mod:`alchemist.bundle.datafiles`).
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path

from alchemist.job.jobdir import make_private_dir

DEFAULT_MAX_VALUE_BYTES = 100 * 1024 * 1024
DEFAULT_MAX_DATA_BYTES = 100 * 1024 * 1024


def home() -> Path:
    """The Alchemist home directory (created 0700 on first use)."""
    path = Path(os.environ.get("ALCHEMIST_HOME") or Path.home() / ".alchemist").expanduser()
    return make_private_dir(path)


def jobs_root() -> Path:
    """The folder of the job directories (created 0700 on first use)."""
    return make_private_dir(home() / "jobs")


def db_url() -> str:
    return os.environ.get("ALCHEMIST_DB_URL") or f"sqlite:///{home() / 'jobs.sqlite'}"


def current_user() -> str:
    """The owner of jobs submitted from this process.

    Behind JupyterHub the single-user server exports ``JUPYTERHUB_USER``; elsewhere it
    is the login name.
    """
    return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()


def max_value_bytes() -> int:
    raw = os.environ.get("ALCHEMIST_MAX_VALUE_BYTES")
    return int(raw) if raw else DEFAULT_MAX_VALUE_BYTES


def max_data_bytes() -> int:
    raw = os.environ.get("ALCHEMIST_MAX_DATA_BYTES")
    return int(raw) if raw else DEFAULT_MAX_DATA_BYTES
