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

:func:`runtime_dir` is this account's private folder for unix sockets on this machine
(the warm pool's, the ranks' diagnosis sockets): a folder of the temporary directory
with an unguessable name, made by ``mkdtemp`` (0700, atomically, by its owner), whose
path the Alchemist home remembers per host. A name derived from the uid could be made
first by another account (the user would lose warm starts and socket diagnosis) or
pass to the next account given a deleted one's uid; this one cannot be guessed, and
the next account, with another home, makes its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import os
import socket
import stat
import tempfile
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


def sweeps_root() -> Path:
    """The folder of the sweep directories (created 0700 on first use; see
    :class:`alchemist.job.sweepdir.SweepDir`)."""
    return make_private_dir(home() / "sweeps")


def private_dir_problem(path: Path, closed: int = 0o077) -> str | None:
    """Why ``path`` is not a private folder of this account (None: it is): not a folder
    (a link, a file, missing), owned by another account, or open to others in the mode
    bits of ``closed`` (0o022: others may read and enter, but not write)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"{path}: {e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    if st.st_uid != os.getuid():
        return f"{path} belongs to another account (uid {st.st_uid})"
    if st.st_mode & closed & 0o044:
        return f"{path} is open to other accounts (mode {stat.filemode(st.st_mode)})"
    if st.st_mode & closed:
        return f"{path} can be written by other accounts (mode {st.st_mode & 0o777:o})"
    return None


def runtime_dir() -> Path:
    """This account's private folder for sockets on this machine (see the module's
    docstring): the one the home remembers for this host while it is still a private
    folder of ours, else a new ``mkdtemp`` folder, remembered from now on. A lock in
    the (private) home keeps two processes from making two."""
    pointers = make_private_dir(home() / "runtime")
    pointer = pointers / (socket.gethostname() or "localhost")
    with open(pointers / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(OSError, ValueError):
            remembered = Path(pointer.read_text().strip())
            if remembered.is_absolute() and private_dir_problem(remembered) is None:
                return remembered
        made = Path(tempfile.mkdtemp(prefix=f"alchemist-{os.getuid()}-"))
        scratch = pointers / f".{pointer.name}.new"
        scratch.write_text(f"{made}\n")
        os.replace(scratch, pointer)
        return made


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
