"""One rank of a job: ``python -m alchemist.runtime JOB_DIR`` (run by torchrun).

The rank sends its stdout and stderr to ``logs/rank-<r>.log`` (appending, so a
restarted attempt adds to the same file), joins the process group (NCCL on GPUs, gloo
on CPU), rebuilds the cell's namespace from the bundle and executes the cell. Rank 0
then pickles the values named with ``--outputs``.
"""

from __future__ import annotations

import linecache
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from alchemist.errors import AlchemistError
from alchemist.job.algorithms import needs_own_launcher
from alchemist.job.jobdir import JobDir, atomic_write_bytes

_EXIT_USER_ERROR = 1


def _redirect_output(path: Path) -> None:
    """Point fds 1 and 2 at ``path`` so output of C extensions and subprocesses is kept too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115


def _rank_env() -> tuple[int, int, int]:
    def first(*names: str, default: str) -> int:
        for n in names:
            if os.environ.get(n):
                return int(os.environ[n])
        return int(default)

    rank = first("RANK", "HOROVOD_RANK", default="0")
    world = first("WORLD_SIZE", "HOROVOD_SIZE", default="1")
    local = first("LOCAL_RANK", "HOROVOD_LOCAL_RANK", default="0")
    # Context reads the torch names; horovodrun sets only its own.
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    os.environ.setdefault("LOCAL_RANK", str(local))
    return rank, world, local


def _attempt_store(world_size: int) -> Any:
    """The rendezvous store for this attempt, or None to let torch pick.

    torchrun's workers share the agent's TCPStore across restarts, and the default
    process group's keys carry no attempt number: after a restart a rank can read a
    dead peer's address from the previous attempt and fail to connect (or hang). A
    prefix per attempt keeps the attempts apart.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    from datetime import timedelta

    import torch.distributed as dist

    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world_size,
        is_master=False,
        timeout=timedelta(minutes=30),
    )
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    # A warm pool's store serves many jobs: its daemon gives each attempt its own prefix.
    prefix = os.environ.get("ALCHEMIST_STORE_PREFIX") or f"alchemist/attempt-{attempt}"
    return dist.PrefixStore(prefix, store)


def _init_process_group(algorithm: str) -> None:
    if needs_own_launcher(algorithm):
        return  # horovod.init() is called by the horovod algorithm's wrap()
    import torch
    import torch.distributed as dist

    from alchemist.runtime.context import context

    ctx = context()
    if ctx.world_size <= 1 and "MASTER_ADDR" not in os.environ:
        return
    kwargs: dict[str, Any] = {}
    store = _attempt_store(ctx.world_size)
    if store is not None:
        kwargs = {"store": store, "rank": ctx.rank, "world_size": ctx.world_size}
    from alchemist.runtime.recorder import collective_timeout

    timeout = collective_timeout()  # $ALCHEMIST_COLLECTIVE_TIMEOUT; None: torch's default
    if ctx.device.type == "cuda":
        torch.cuda.set_device(ctx.device)
        dist.init_process_group("nccl", device_id=ctx.device, timeout=timeout, **kwargs)
    else:
        dist.init_process_group("gloo", timeout=timeout, **kwargs)
    if store is not None:
        _all_ranks_made_the_group(store, ctx.world_size)


#: Store key counting the ranks that finished making the process group (per attempt).
_GROUP_MADE_KEY = "alchemist/group-made"


def _all_ranks_made_the_group(store: Any, world_size: int) -> None:
    """Return once every rank has finished making the process group.

    A rank whose code ends at once could otherwise exit while a peer still connects its
    gloo mesh, and that peer fails with "Connection closed by peer" (seen with 12 tiny
    jobs at once). This meets on the rendezvous store, not in a collective, so the
    group's collective sequence numbers (which the hang diagnosis names) are the user's.
    """
    if store.add(_GROUP_MADE_KEY, 1) == world_size:
        store.set(f"{_GROUP_MADE_KEY}/all", "1")
    store.wait([f"{_GROUP_MADE_KEY}/all"])


def _save_outputs(job_dir: JobDir, names: list[str], ns: dict[str, Any]) -> None:
    """Pickle the named values rank 0 has. A name the cell did not define is said in
    the log, and the others are kept: the work is done, and is not lost over one name."""
    import cloudpickle

    missing = [n for n in names if n not in ns]
    if missing:
        print(
            f"[alchemist] warning: -o names {', '.join(missing)}, which the cell did not"
            " define on rank 0; the other outputs are kept",
            file=sys.stderr,
            flush=True,
        )
    kept = {n: ns[n] for n in names if n in ns}
    try:
        blob = cloudpickle.dumps(kept)
    except Exception:  # one value cannot be pickled: keep the others, say which
        good = {}
        for name, value in kept.items():
            try:
                cloudpickle.dumps(value)
                good[name] = value
            except Exception as e:
                print(
                    f"[alchemist] warning: output {name!r} cannot be pickled"
                    f" ({type(e).__name__}: {e}); the other outputs are kept",
                    file=sys.stderr,
                    flush=True,
                )
        blob = cloudpickle.dumps(good)
    atomic_write_bytes(job_dir.outputs, blob)


#: The file name a cell's code runs under (IPython's own names are the kernel's).
CELL_FILE = "<cell>"


def user_code_file(source: str, script: str | None, entry: str) -> str:
    """The file name the user's code is compiled under, its source registered with
    :mod:`linecache`: a script's own path (as under torchrun), else :data:`CELL_FILE`.
    Tracebacks and warnings then name it and show the line, as in the kernel."""
    name = os.path.abspath(script) if script is not None and entry != "cell" else CELL_FILE
    # mtime None: linecache.checkcache keeps the entry (the source is what ran, even
    # if the file on disk changes meanwhile).
    linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
    return name


#: What torch says when code asks for CUDA where there is none (a CPU build, no driver,
#: no device given to the process).
_NO_CUDA = (
    "_cuda_setDevice",
    "_cuda_getDeviceCount",
    "Torch not compiled with CUDA enabled",
    "No CUDA GPUs are available",
    "Found no NVIDIA driver",
    "CUDA driver initialization failed",
)


def _no_gpu_hint(exc: BaseException, spec: dict[str, Any]) -> str | None:
    """One line for a job without GPUs whose code failed asking for one."""
    gpus = int((spec.get("resources") or {}).get("gpus") or 0)
    if gpus or not any(mark in str(exc) for mark in _NO_CUDA):
        return None
    return (
        "[alchemist] this job has no GPU: submit it with --gpus-per-worker N, or"
        " let the code run on CPU (device = alchemist.context().device picks what the"
        " job has)"
    )


def _user_traceback(exc: BaseException, user_file: str | None = None) -> str:
    """The traceback from the user's frames on (our own frames are noise to the user)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != user_file:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))


def start_reporting(job_dir: JobDir, rank: int) -> Any:
    """Give this rank its metrics reporter and start its system sampler; returns the
    sampler (to stop at the end), or None where it cannot run. A batch rank's and an
    interactive session engine's set-up alike."""
    from alchemist.metrics import reporter as reporter_mod

    reporter_mod.set_reporter(reporter_mod.Reporter(job_dir, job_dir.job_id, rank))
    try:
        from alchemist.metrics import system

        return system.start_sampler(reporter_mod.get_reporter())
    except (ImportError, AttributeError):
        return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m alchemist.runtime JOB_DIR", file=sys.stderr)
        return 2
    job_dir = JobDir(Path(argv[0]))
    rank, world, _ = _rank_env()
    os.environ.setdefault("ALCHEMIST_JOB_DIR", str(job_dir.root))
    os.environ.setdefault("ALCHEMIST_JOB_ID", job_dir.job_id)
    _redirect_output(job_dir.rank_log(rank))
    job_dir.pids.mkdir(exist_ok=True)
    (job_dir.rank_pid(rank)).write_text(str(os.getpid()))
    # Stacks on SIGUSR1, the stall watchdog and the request responder, before anything
    # that can hang (the rendezvous): alchemist.runtime.hooks; and a modest flight
    # recorder, before torch makes the process group: alchemist.runtime.recorder.
    from alchemist.runtime import hooks, recorder

    recorder.enable()
    hooks.install(job_dir, rank)

    import json

    spec = json.loads(job_dir.spec.read_text())
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if rank == 0:
        atomic_write_bytes(job_dir.restarts, str(attempt).encode())
    started = time.time()

    from alchemist.metrics import reporter as reporter_mod

    sampler = None
    user_file: str | None = None
    try:
        _init_process_group(spec.get("algorithm", "sync"))
        from alchemist.runtime.context import context

        ctx = context()
        print(
            f"[alchemist] rank {rank}/{world} on {socket.gethostname()} device={ctx.device}"
            + (f" attempt={attempt + 1}" if attempt else ""),
            flush=True,
        )
        sampler = start_reporting(job_dir, rank)

        from alchemist.bundle.store import enter_workspace, load_bundle, set_argv

        enter_workspace(job_dir.bundle)  # paths first: unpickling may import model.py
        source, ns, manifest = load_bundle(job_dir.bundle)
        # Lightning, Accelerate, Transformers and torchrun scripts as they are: the
        # library hooks (applied when the code imports a library) and a script's argv.
        from alchemist.runtime import integrations
        from alchemist.runtime.integrations import torchrun

        integrations.install()
        script = set_argv(job_dir.bundle)
        if script is not None:
            ns.setdefault("__file__", os.path.abspath(script))
        user_file = user_code_file(source, script, manifest["entry"])
        code = compile(source, user_file, "exec")
        exec(code, ns)
        # Close what the algorithms keep open (a last BMUF block, the async/EASGD
        # servers) so that rank 0's outputs are the final parameters.
        from alchemist.runtime import algorithms

        algorithms.finish_all()
        if rank == 0 and spec.get("outputs"):
            _save_outputs(job_dir, list(spec["outputs"]), ns)
        status = 0
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr, flush=True)  # as Python does for sys.exit("why")
        elif status:
            print(f"[alchemist] the code called sys.exit({status})", file=sys.stderr, flush=True)
    except AlchemistError as e:
        print(f"[alchemist] error: {e}", file=sys.stderr, flush=True)
        status = _EXIT_USER_ERROR
    except BaseException as e:
        sys.stderr.write(_user_traceback(e, user_file))
        hint = _no_gpu_hint(e, spec)
        if hint:
            print(hint, file=sys.stderr, flush=True)
        status = _EXIT_USER_ERROR
        recorder.dump_on_failure(job_dir, rank, e)  # a collective timed out: its recorder
    finally:
        if sampler is not None:
            try:
                sampler.stop()
            except Exception:
                pass
        try:
            reporter_mod.get_reporter().close()
        except Exception:
            pass
    hooks.stop(job_dir, rank)  # the code ended: teardown is no stall
    # Before any teardown: a rank that aborts at interpreter exit after this line has
    # finished its work, and the job's outcome comes from these records.
    from alchemist.job import outcomes

    outcomes.record(job_dir, rank, attempt, status)
    if status == 0:
        try:
            from alchemist.runtime.integrations import torchrun

            torchrun.destroy()
        except Exception:
            pass
    print(
        f"[alchemist] rank {rank} exited with status {status} after {time.time() - started:.1f}s",
        flush=True,
    )
    return status
