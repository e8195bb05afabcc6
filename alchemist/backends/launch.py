"""The worker command line, shared by every backend.

Each worker (a local process group, or a pod) runs torch's elastic launcher with one
process per GPU (or one on CPU); every process runs ``python -m alchemist.runtime
JOB_DIR``. The local backend runs a single launcher for all workers; Kubernetes runs
one launcher per pod with ``--nnodes`` = workers and ``--node-rank`` from the pod's
completion index.
"""

from __future__ import annotations

from alchemist.jobdir import JobDir
from alchemist.spec import JobSpec

#: Environment variables every worker process gets (besides the user's ``--env``).
RUNTIME_MODULE = "alchemist.runtime"


def worker_env(job_id: str, job_dir: JobDir, spec: JobSpec) -> dict[str, str]:
    """Variables the runtime reads to find its job; the user's ``env`` wins on conflicts."""
    env = {
        "ALCHEMIST_JOB_ID": job_id,
        "ALCHEMIST_JOB_DIR": str(job_dir.root),
        # torchrun warns on every launch unless this is set; one thread per rank is
        # what torchrun would pick anyway.
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.update(spec.env)
    return env


def torchrun_args(
    spec: JobSpec,
    *,
    nnodes: int = 1,
    node_rank: str | int | None = None,
    master_addr: str | None = None,
    master_port: int | str | None = None,
    nproc_per_node: int | None = None,
) -> list[str]:
    """Arguments of ``torch.distributed.run`` (without the program).

    With ``master_addr`` unset the launcher runs standalone (a single node that picks a
    free port), which is what the local backend uses.
    """
    nproc = nproc_per_node if nproc_per_node is not None else spec.procs_per_worker
    args = [f"--nproc-per-node={nproc}", f"--max-restarts={spec.max_restarts}"]
    if master_addr is None:
        args.insert(0, "--standalone")
    else:
        args += [
            f"--nnodes={nnodes}",
            f"--node-rank={node_rank}",
            f"--master-addr={master_addr}",
            f"--master-port={master_port}",
        ]
    # Poll worker health twice a second: the default 5 s makes short jobs and failure
    # detection slow.
    args.append("--monitor-interval=0.5")
    return args


def runtime_args(job_dir: JobDir) -> list[str]:
    return ["-m", RUNTIME_MODULE, str(job_dir.root)]
