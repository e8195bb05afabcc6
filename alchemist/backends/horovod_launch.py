"""The ``horovodrun`` command line of a job (``--algorithm horovod``).

Horovod jobs are launched by ``horovodrun`` instead of torchrun: it starts one process
per slot with ``HOROVOD_RANK``/``HOROVOD_SIZE``/``HOROVOD_LOCAL_RANK`` set (the runtime
maps them onto ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``), and ``hvd.init()`` in the
algorithm's ``wrap`` joins them. The gloo controller is used (no MPI needed); on GPU
the gradients go over NCCL when Horovod was built with it.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence

from alchemist.backends.launch import runtime_args
from alchemist.errors import BackendError
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobSpec

INSTALL_HINT = (
    "Horovod is not installed (horovodrun not found): run scripts/setup.d/50-horovod.sh"
    " from the Alchemist checkout, or choose another --algorithm (sync, async, bmuf, easgd)"
)


def horovodrun_path(python: str | None = None) -> str:
    """The ``horovodrun`` next to ``python`` (the venv), else on ``PATH``.

    Raises:
        BackendError: Horovod is not installed (the message says how to install it).
    """
    from pathlib import Path

    candidate = Path(python or sys.executable).with_name("horovodrun")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("horovodrun")
    if found is None:
        raise BackendError(INSTALL_HINT)
    return found


def horovodrun_args(
    spec: JobSpec,
    job_dir: JobDir,
    *,
    hosts: Sequence[tuple[str, int]] | None = None,
    python: str | None = None,
    horovodrun: str | None = None,
    start_timeout: int = 60,
) -> list[str]:
    """The full argv that runs ``spec``'s workers under ``horovodrun``.

    Args:
        spec: the job (``world_size`` processes in all).
        job_dir: its directory (passed to ``python -m alchemist.runtime``).
        hosts: ``(host, slots)`` pairs; default all slots on ``localhost`` (the local
            backend).
        python: the interpreter the ranks run (default this one).
        horovodrun: the launcher's path (default :func:`horovodrun_path`).
        start_timeout: seconds horovodrun waits for every rank to start.

    Returns:
        e.g. ``[".../horovodrun", "-np", "2", "-H", "localhost:2", "--gloo",
        "--start-timeout", "60", ".../python", "-u", "-m", "alchemist.runtime", JOB_DIR]``.

    Raises:
        BackendError: Horovod is not installed (only when ``horovodrun`` is not given).
    """
    py = python or sys.executable
    launcher = horovodrun or horovodrun_path(py)
    slots = list(hosts) if hosts else [("localhost", spec.world_size)]
    if sum(n for _, n in slots) < spec.world_size:
        raise BackendError(
            f"the hosts offer {sum(n for _, n in slots)} slots but the job needs {spec.world_size}"
        )
    host_list = ",".join(f"{h}:{n}" for h, n in slots)
    return [
        launcher,
        "-np",
        str(spec.world_size),
        "-H",
        host_list,
        "--gloo",
        "--start-timeout",
        str(start_timeout),
        py,
        "-u",
        *runtime_args(job_dir),
    ]


def horovod_argv(spec: JobSpec, job_dir: JobDir) -> list[str]:
    """The local backend's command for a Horovod job: all slots on ``localhost``, run by
    :mod:`alchemist.backends.horovod_loopback` (horovodrun with its rendezvous and the
    ranks' interface on loopback).

    Raises:
        BackendError: Horovod is not installed (the message says how to install it).
    """
    from alchemist.backends.horovod_loopback import LOOPBACK_ARGS

    args = horovodrun_args(spec, job_dir)  # checks that horovodrun is installed
    launcher = [sys.executable, "-m", "alchemist.backends.horovod_loopback"]
    return [*launcher, *LOOPBACK_ARGS, *args[1:]]
