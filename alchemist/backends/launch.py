"""The worker command line, shared by every backend.

Each worker (a local process group, or a pod) runs torch's elastic launcher with one
process per GPU (or one on CPU); every process runs ``python -m alchemist.runtime
JOB_DIR``. The local backend runs a single launcher for all workers; Kubernetes runs
one launcher per pod with ``--nnodes`` = workers and ``--node-rank`` from the pod's
completion index.

A local job's launcher listens on loopback only: ``python -m alchemist.backends.launch
torch.distributed.run ARGS`` is torchrun with its rendezvous store bound to 127.0.0.1
(:func:`loopback_torchrun` says how and why).
"""

from __future__ import annotations

import runpy
import socket
import sys
from typing import Any

from alchemist.job.jobdir import JobDir
from alchemist.job.spec import RANK_ENTRIES, JobSpec

#: The address a local job's rendezvous store listens on and its ranks connect to (the
#: parameter server of ``async``/``easgd`` then binds it too: ``_ps.advertised_host``).
LOOPBACK = "127.0.0.1"
#: The one program :func:`loopback_torchrun` runs.
TORCHRUN = "torch.distributed.run"


def rank_threads(cpus_per_worker: float | None, spec: JobSpec) -> int:
    """CPU threads each rank's torch and OpenMP use (``OMP_NUM_THREADS``): its worker's
    CPUs shared by the worker's ranks, at least one. Unknown CPUs: one (torchrun's pick
    for several ranks). A 1-rank job of an 8-core pod no longer runs on one core."""
    if not cpus_per_worker or cpus_per_worker <= 0:
        return 1
    return max(1, int(cpus_per_worker // spec.procs_per_worker))


def worker_env(
    job_id: str, job_dir: JobDir, spec: JobSpec, cpus_per_worker: float | None = None
) -> dict[str, str]:
    """Variables the runtime reads to find its job; the user's ``env`` wins on conflicts.

    ``OMP_NUM_THREADS`` is :func:`rank_threads` of the worker's CPUs (``cpus_per_worker``:
    the cores the local machine gives each worker, a pod's CPU request). With
    ``spec.debug``, ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` too (ranks calling different
    collectives fail at once, naming both: docs/diagnosis.md).
    """
    env = {
        "ALCHEMIST_JOB_ID": job_id,
        "ALCHEMIST_JOB_DIR": str(job_dir.root),
        # Set always: torchrun warns on every launch unless it is.
        "OMP_NUM_THREADS": str(rank_threads(cpus_per_worker, spec)),
        "PYTHONUNBUFFERED": "1",
    }
    if spec.debug:
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    env.update(spec.env)
    return env


def torchrun_args(
    spec: JobSpec,
    *,
    nnodes: int = 1,
    node_rank: str | int,
    master_addr: str,
    master_port: int | str,
    nproc_per_node: int | None = None,
) -> list[str]:
    """Arguments of ``torch.distributed.run`` (without the program): a static rendezvous
    on ``master_addr:master_port`` (never ``--standalone``, whose store listens on every
    interface; the local backend's goes through :func:`local_launcher_args`)."""
    nproc = nproc_per_node if nproc_per_node is not None else spec.procs_per_worker
    args = [
        f"--nproc-per-node={nproc}",
        f"--max-restarts={spec.max_restarts}",
        f"--nnodes={nnodes}",
        f"--node-rank={node_rank}",
        f"--master-addr={master_addr}",
        f"--master-port={master_port}",
    ]
    # Poll worker health ten times a second: the default 5 s makes short jobs and failure
    # detection slow.
    args.append("--monitor-interval=0.1")
    return args


def runtime_args(job_dir: JobDir) -> list[str]:
    entry = RANK_ENTRIES["cell"]
    return ["-m", entry.module, *entry.argv(str(job_dir.root), "")]


def local_launcher_args(spec: JobSpec, nproc_per_node: int) -> list[str]:
    """Python arguments (after the interpreter) of a local job's launcher: one node,
    ``nproc_per_node`` ranks, its rendezvous store on loopback (see :func:`loopback_torchrun`;
    port 0 there means a free one, picked at launch)."""
    return [
        "-m",
        "alchemist.backends.launch",
        TORCHRUN,
        *torchrun_args(
            spec,
            nnodes=1,
            node_rank=0,
            master_addr=LOOPBACK,
            master_port=0,
            nproc_per_node=nproc_per_node,
        ),
    ]


_STORE: Any = None  # the loopback store server; lives as long as this launcher


def loopback_socket(port: int = 0) -> socket.socket:
    """A TCP socket listening on :data:`LOOPBACK` (``port=0``: a free port, bound at
    once, so no other process can take it before the store starts on it)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((LOOPBACK, port))
    sock.listen(128)
    return sock


def store_on(sock: socket.socket) -> Any:
    """A TCPStore server on the listening socket ``sock`` (which it then owns).

    torch's TCPStore server listens on every interface (``::``) whatever host it is
    given; a listening socket handed over with ``master_listen_fd`` is its one way to
    listen elsewhere. Used by the loopback launcher, the warm pool's daemon and the
    interactive session's supervisor (which binds the socket before importing torch).
    """
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore(
        LOOPBACK,
        int(sock.getsockname()[1]),
        is_master=True,
        multi_tenant=True,
        wait_for_workers=False,
        timeout=timedelta(minutes=30),
        master_listen_fd=sock.detach(),  # the store server owns the socket from here
    )


def loopback_store(port: int = 0) -> tuple[Any, int]:
    """A TCPStore server listening on :data:`LOOPBACK` only, and its port."""
    sock = loopback_socket(port)
    port = int(sock.getsockname()[1])
    return store_on(sock), port


def loopback_torchrun(argv: list[str]) -> None:
    """Run ``torch.distributed.run ARGV[1:]`` in this process with its rendezvous store
    listening on ``--master-addr`` (a loopback address) only.

    Why not torchrun alone: torch's TCPStore server listens on every interface (``::``)
    whatever host it is given, so any machine that reaches this one could reach a local
    job's store. Its one way to listen elsewhere is a listening socket handed over with
    ``master_listen_fd``, and torchrun's static rendezvous (``--master-addr/--master-port``)
    opens its one store as a multi-tenant TCPStore, which reuses the server this process
    already runs on that port. So: bind ``--master-addr`` (``--master-port=0``: a free
    port, with no window for another process to take it), start the store server on
    that socket, write its port into ``--master-port`` and run torchrun, whose
    rendezvous, agent and ranks then all use that store.

    Raises:
        SystemExit: ``argv`` is not ``torch.distributed.run`` with ``--master-addr=`` a
            loopback address and ``--master-port=``.
    """
    global _STORE
    if not argv or argv[0] != TORCHRUN:
        raise SystemExit(f"usage: python -m alchemist.backends.launch {TORCHRUN} ARGS")
    args = argv[1:]
    # torchrun's own options end at the program (a script, or -m MODULE).
    end = next((i for i, a in enumerate(args) if not a.startswith("-") or a == "-m"), len(args))
    opts = {a.split("=", 1)[0]: i for i, a in enumerate(args[:end]) if "=" in a}
    if "--master-addr" not in opts or "--master-port" not in opts:
        raise SystemExit("the loopback launcher needs --master-addr=ADDR and --master-port=PORT")
    addr = args[opts["--master-addr"]].split("=", 1)[1]
    if addr not in (LOOPBACK, "localhost"):
        raise SystemExit(f"the loopback launcher binds {LOOPBACK} only, not --master-addr={addr}")
    _STORE, port = loopback_store(int(args[opts["--master-port"]].split("=", 1)[1]))
    args[opts["--master-addr"]] = f"--master-addr={LOOPBACK}"
    args[opts["--master-port"]] = f"--master-port={port}"
    sys.argv = [TORCHRUN, *args]
    runpy.run_module(TORCHRUN, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    loopback_torchrun(sys.argv[1:])
