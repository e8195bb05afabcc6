"""One TensorBoard server per job, started on demand, reused, reached only by its owner.

:func:`open_tensorboard` starts TensorBoard on the job's event folder as a detached
process (it outlives the kernel, like the job; :mod:`alchemist.tensorboard.serve`),
listening on a unix socket, ``<runtime>/tensorboard/<job_id>.sock`` in the account's
private runtime folder (:func:`alchemist.job.config.runtime_dir`), waits until its
HTTP API answers there, and records it in ``<ALCHEMIST_HOME>/tensorboard/<job_id>.json``.
A later call (the same kernel, another one, after a restart) reuses the recorded
server while it still answers for that folder. The server ends by itself after
``ALCHEMIST_TENSORBOARD_IDLE_MIN`` minutes without a request (default 60).

No TCP port is opened: a loopback port can be read by every account of the machine,
taken by one before TensorBoard binds it, and jupyter-server-proxy's ``/proxy/<port>/``
forwards to whoever listens there, in the user's own JupyterLab origin. The browser
reaches the socket through the owner's Jupyter server, which checks the user's login:
``<base_url>alchemist/tensorboard/<job_id>/`` (:mod:`alchemist.server.tensorboard`).
The URL a kernel shows is that path under ``JUPYTERHUB_SERVICE_PREFIX`` behind
JupyterHub, else under ``/`` (a JupyterLab with its default base URL);
``ALCHEMIST_TENSORBOARD_URL`` overrides it with a template such as
``https://lab.example/alchemist/tensorboard/{job_id}/``.

Before serving, events that the job's TensorBoard writer has not converted (for example
logged by another rank after rank 0 closed its reporter) are converted, when that
writer no longer runs (:func:`alchemist.metrics.tbwriter.catch_up`).

Run layout (see :mod:`alchemist.metrics.tbwriter`): rank 0 writes in the folder itself
(TensorBoard run ``.``), rank ``r`` in ``rank-<r>/``; tags are the metric names.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from alchemist.errors import AlchemistError
from alchemist.job import config
from alchemist.job.jobdir import JobDir, atomic_write_json, make_private_dir

START_TIMEOUT = 60.0
#: Minutes without a request after which a TensorBoard server ends by itself.
IDLE_VAR = "ALCHEMIST_TENSORBOARD_IDLE_MIN"
DEFAULT_IDLE_MIN = 60.0
#: The route of a job's TensorBoard under the Jupyter server's base URL.
ROUTE = "alchemist/tensorboard"


class TensorBoardError(AlchemistError):
    """TensorBoard could not be started (the message says why and what to do)."""


@dataclass(frozen=True)
class TensorBoardHandle:
    """A running TensorBoard server.

    Attributes:
        url: where a user opens it (through the owner's Jupyter server).
        pid: the server's process id.
        logdir: the folder it serves.
        socket: the unix socket it listens on (:func:`get` reads it from code).
    """

    url: str
    pid: int
    logdir: str
    socket: str

    def _repr_html_(self) -> str:
        return f'<a href="{self.url}" target="_blank" rel="noopener">TensorBoard ↗</a> ({self.url})'


def _registry(job_id: str) -> Path:
    return make_private_dir(config.home() / "tensorboard") / f"{job_id}.json"


def socket_path(job_id: str) -> Path:
    """Where job ``job_id``'s TensorBoard listens: ``<runtime>/tensorboard/<id>.sock``."""
    return make_private_dir(config.runtime_dir() / "tensorboard") / f"{job_id}.sock"


def idle_s() -> float:
    raw = os.environ.get(IDLE_VAR, "").strip()
    try:
        minutes = float(raw) if raw else DEFAULT_IDLE_MIN
    except ValueError:
        raise TensorBoardError(f"{IDLE_VAR} must be a number of minutes, got {raw!r}") from None
    if not 0 < minutes < 1e6:
        raise TensorBoardError(f"{IDLE_VAR} must be more than 0 minutes, got {raw!r}")
    return minutes * 60


def public_url(job_id: str) -> str:
    """The URL a user's browser opens for job ``job_id``'s TensorBoard."""
    template = os.environ.get("ALCHEMIST_TENSORBOARD_URL")
    if template:
        return template.format(job_id=job_id)
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX") or "/"
    return f"{prefix.rstrip('/')}/{ROUTE}/{job_id}/"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def get(sock: str | Path, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
    """``(status, body)`` of ``GET path`` on the TensorBoard listening at ``sock``.

    Raises:
        OSError: nothing answers there.
    """
    conn = _UnixConnection(str(sock), timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    except http.client.HTTPException as e:
        raise OSError(f"TensorBoard at {sock}: {e}") from None
    finally:
        conn.close()


def _answers(sock: str | Path, timeout: float = 2.0) -> bool:
    try:
        return get(sock, "/data/runs", timeout)[0] == 200
    except OSError:
        return False


def _alive(pid: int, logdir: str) -> bool:
    try:
        import psutil

        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and logdir in proc.cmdline()
    except Exception:
        return False


def _logdir_of(job: Any) -> tuple[str, Path]:
    if isinstance(job, (str, Path)):
        root = Path(job)
        return root.name, JobDir(root).tensorboard
    job_dir: JobDir = job.job_dir
    return str(job.id), job_dir.tensorboard


def _recorded(job_id: str) -> dict[str, Any] | None:
    try:
        data = json.loads(_registry(job_id).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and {"pid", "socket", "logdir"} <= set(data) else None


def find_tensorboard(job: Any) -> TensorBoardHandle | None:
    """The recorded server of ``job`` if it still runs and answers, else None."""
    job_id, logdir = _logdir_of(job)
    data = _recorded(job_id)
    if data is None or data["logdir"] != str(logdir):
        return None
    if not _alive(int(data["pid"]), str(logdir)) or not _answers(data["socket"]):
        return None
    return TensorBoardHandle(public_url(job_id), int(data["pid"]), str(logdir), data["socket"])


def serving_socket(job_id: str) -> str | None:
    """The socket of job ``job_id``'s running TensorBoard (what the Jupyter server's
    route forwards to), or None: not started, ended, or idle-stopped."""
    data = _recorded(job_id)
    if data is None or not _alive(int(data["pid"]), str(data["logdir"])):
        return None
    return str(data["socket"])


def open_tensorboard(job: Any, timeout: float = START_TIMEOUT) -> TensorBoardHandle:
    """Start, or reuse, the TensorBoard server of ``job``.

    Args:
        job: an ``alchemist.client.Job`` (anything with ``id`` and ``job_dir``) or the
            path of a job directory.
        timeout: seconds to wait for a new server to answer.

    Returns:
        The server's handle; its ``url`` is what to open.

    Raises:
        TensorBoardError: the server did not start (the message includes its error).
    """
    job_id, logdir = _logdir_of(job)
    from alchemist.metrics.tbwriter import catch_up

    catch_up(logdir.parent)  # events logged after the job's writer stopped, if any
    existing = find_tensorboard(job)
    if existing is not None:
        return existing
    stop_tensorboard(job)  # one recorded that no longer answers
    logdir.mkdir(parents=True, exist_ok=True)
    log_path = _registry(job_id).with_suffix(".log")
    sock = socket_path(job_id)
    argv = [sys.executable, "-m", "alchemist.tensorboard.serve", str(logdir), str(sock)]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*argv, str(idle_s())],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives the kernel, like the job itself
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if _answers(sock, timeout=1.0):
            handle = TensorBoardHandle(public_url(job_id), proc.pid, str(logdir), str(sock))
            atomic_write_json(_registry(job_id), asdict(handle))
            return handle
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        raise TensorBoardError(
            f"TensorBoard for job {job_id} did not answer within {timeout:.0f}s; see {log_path}"
        )
    tail = log_path.read_text(errors="replace").strip()
    last = tail.splitlines()[-1] if tail else "no output"
    raise TensorBoardError(
        f"TensorBoard for job {job_id} exited at start: {last} (log: {log_path})"
    )


def stop_tensorboard(job: Any) -> bool:
    """Stop the recorded server of ``job``; return whether one was running."""
    job_id, logdir = _logdir_of(job)
    data = _recorded(job_id)
    _registry(job_id).unlink(missing_ok=True)
    if data is None:
        return False
    pid = int(data["pid"])
    if not _alive(pid, str(logdir)):
        return False
    try:
        os.killpg(pid, signal.SIGTERM)  # its own session: the group is just the server
    except ProcessLookupError:
        return False
    try:
        import psutil

        psutil.Process(pid).wait(10)
    except Exception:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return True
