"""One TensorBoard server per job, started on demand and reused.

:func:`open_tensorboard` starts ``tensorboard --logdir <job_dir>/tensorboard --host
127.0.0.1 --port <free port>`` as a detached process (it outlives the kernel, like the
job), waits until its HTTP API answers, and records it in
``<ALCHEMIST_HOME>/tensorboard/<job_id>.json``. A later call (the same kernel, another
one, after a restart) reuses the recorded server while it still answers on that port
for that folder.

Where to open it: behind JupyterHub (``JUPYTERHUB_SERVICE_PREFIX`` is set, e.g.
``/user/alice/``) the URL goes through the user's own server with jupyter-server-proxy:
``/user/alice/proxy/<port>/`` (TensorBoard is never exposed beyond 127.0.0.1). Outside
JupyterHub it is ``http://127.0.0.1:<port>/``. ``ALCHEMIST_TENSORBOARD_URL`` overrides
both with a template such as ``https://lab.example/proxy/{port}/``.

Before serving, events that the job's TensorBoard writer has not converted (for example
logged by another rank after rank 0 closed its reporter) are converted, when that
writer no longer runs (:func:`alchemist.metrics.tbwriter.catch_up`).

Run layout (see :mod:`alchemist.metrics.tbwriter`): rank 0 writes in the folder itself
(TensorBoard run ``.``), rank ``r`` in ``rank-<r>/``; tags are the metric names.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from alchemist.errors import AlchemistError
from alchemist.job import config
from alchemist.job.jobdir import JobDir, atomic_write_json

START_TIMEOUT = 60.0


class TensorBoardError(AlchemistError):
    """TensorBoard could not be started (the message says why and what to do)."""


@dataclass(frozen=True)
class TensorBoardHandle:
    """A running TensorBoard server.

    Attributes:
        url: where a user opens it (through jupyter-server-proxy behind JupyterHub).
        port: the port on 127.0.0.1.
        pid: the server's process id.
        logdir: the folder it serves.
        local_url: ``http://127.0.0.1:<port>/`` (for code on this machine).
    """

    url: str
    port: int
    pid: int
    logdir: str
    local_url: str

    def _repr_html_(self) -> str:
        return f'<a href="{self.url}" target="_blank" rel="noopener">TensorBoard ↗</a> ({self.url})'


def _registry(job_id: str) -> Path:
    folder = config.home() / "tensorboard"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{job_id}.json"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def public_url(port: int) -> str:
    """The URL a user's browser opens for a server on 127.0.0.1:``port``."""
    template = os.environ.get("ALCHEMIST_TENSORBOARD_URL")
    if template:
        return template.format(port=port)
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX")
    if prefix:
        return f"{prefix.rstrip('/')}/proxy/{port}/"
    return f"http://127.0.0.1:{port}/"


def _answers(port: int, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=timeout) as r:
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError):
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


def find_tensorboard(job: Any) -> TensorBoardHandle | None:
    """The recorded server of ``job`` if it still runs and answers, else None."""
    job_id, logdir = _logdir_of(job)
    try:
        data = json.loads(_registry(job_id).read_text())
    except (OSError, ValueError):
        return None
    if data.get("logdir") != str(logdir):
        return None
    if not _alive(int(data["pid"]), str(logdir)) or not _answers(int(data["port"])):
        return None
    port = int(data["port"])
    return TensorBoardHandle(
        public_url(port), port, int(data["pid"]), str(logdir), data["local_url"]
    )


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
    logdir.mkdir(parents=True, exist_ok=True)
    log_path = _registry(job_id).with_suffix(".log")
    for _attempt in range(3):  # a port taken between probing and binding: try another
        port = _free_port()
        argv = [
            sys.executable, "-m", "tensorboard.main",
            "--logdir", str(logdir),
            "--host", "127.0.0.1",
            "--port", str(port),
            "--reload_interval", "2",
        ]  # fmt: skip
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # outlives the kernel, like the job itself
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            if _answers(port, timeout=1.0):
                handle = TensorBoardHandle(
                    public_url(port), port, proc.pid, str(logdir), f"http://127.0.0.1:{port}/"
                )
                atomic_write_json(_registry(job_id), asdict(handle))
                return handle
            time.sleep(0.2)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            raise TensorBoardError(
                f"TensorBoard for job {job_id} did not answer within {timeout:.0f}s; see {log_path}"
            )
        proc.wait()
        tail = log_path.read_text(errors="replace")[-2000:]
        if "already in use" not in tail and "Address already" not in tail:
            last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
            raise TensorBoardError(
                f"TensorBoard for job {job_id} exited at start: {last} (log: {log_path})"
            )
    raise TensorBoardError(f"TensorBoard for job {job_id}: no free port found; try again")


def stop_tensorboard(job: Any) -> bool:
    """Stop the recorded server of ``job``; return whether one was running."""
    job_id, logdir = _logdir_of(job)
    reg = _registry(job_id)
    try:
        data = json.loads(reg.read_text())
    except (OSError, ValueError):
        return False
    reg.unlink(missing_ok=True)
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
