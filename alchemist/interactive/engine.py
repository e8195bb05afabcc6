"""One rank of a session: ``python -m alchemist.interactive.engine JOB_DIR RANK``.

Before it registers with the controller (so before the first cell), the engine sets
itself up exactly as a batch rank does (:mod:`alchemist.runtime.worker`, whose pieces
it calls): output to ``logs/rank-<r>.log``, its pid file, the flight recorder and the
hang-diagnosis hooks, the process group (gloo on CPU, NCCL on GPUs) on the session's
store under an attempt prefix with the session's collective timeout, the metrics
reporter and the system sampler. Then it runs an ipyparallel engine whose id is the
rank. Cells use ``alchemist.context/distribute/shard/log/save_checkpoint`` unchanged.

Cell output is not sent over ipyparallel's iopub channel: it stays on the rank's fds,
so it lands in the rank's log with C-level and subprocess output, and the notebook
streams it from there (:mod:`alchemist.interactive.output`).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from alchemist.interactive.layout import SessionDir
from alchemist.jobdir import JobDir

_sampler: Any = None


def setup_rank(job_dir: JobDir) -> int:
    """Everything :func:`alchemist.runtime.worker.main` does before the cell; returns the rank."""
    global _sampler
    from alchemist.runtime import worker

    rank, world, _ = worker._rank_env()
    worker._redirect_output(job_dir.rank_log(rank))
    job_dir.pids.mkdir(exist_ok=True)
    (job_dir.pids / f"rank-{rank}.pid").write_text(str(os.getpid()))
    from alchemist.diagnosis import hooks, recorder

    recorder.enable()
    hooks.install(job_dir, rank)
    worker._init_process_group("sync")
    from alchemist.runtime.context import context

    ctx = context()
    print(
        f"[alchemist] session rank {rank}/{world} on {socket.gethostname()} device={ctx.device}",
        flush=True,
    )
    _sampler = worker.start_reporting(job_dir, rank)
    # Local ranks run in the notebook's folder (the supervisor's cwd): its modules import.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return rank


def teardown(job_dir: JobDir, rank: int) -> None:
    from alchemist.diagnosis import hooks
    from alchemist.metrics import reporter as reporter_mod

    if _sampler is not None:
        try:
            _sampler.stop()
        except Exception:
            pass
    try:
        reporter_mod.get_reporter().close()
    except Exception:
        pass
    hooks.stop(job_dir, rank)


def wait_for_connection_file(sd: SessionDir, timeout: float) -> None:
    """Wait until the controller's engine connection file exists and reads as JSON (the
    controller writes it in place, so a reader can see half of it).

    The engines start beside the controller, not after it: each imports torch and joins
    the process group while the controller starts, which takes a second off a session's
    start.

    Raises:
        RuntimeError: no complete file within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            json.loads(sd.engine_file.read_text())
            return
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the session's controller wrote no connection file within {timeout:g} s"
                ) from None
            time.sleep(0.02)


def engine_argv(sd: SessionDir, rank: int) -> list[str]:
    return [
        f"--IPEngine.url_file={sd.engine_file}",
        f"--IPEngine.id={rank}",
        # The session's supervisor watches the engines: no nanny process per engine.
        "--IPEngine.enable_nanny=False",
        "--log-level=ERROR",
    ]


def main(argv: list[str]) -> None:
    job_dir = JobDir(Path(argv[0]))
    rank = setup_rank(job_dir)
    sd = SessionDir(job_dir)
    wait_for_connection_file(sd, float(json.loads(sd.config.read_text())["start_timeout"]))
    from ipyparallel.engine.app import IPEngine

    class SessionEngine(IPEngine):
        """An engine whose cell output stays on the rank's fds (its log)."""

        def redirect_output(self, iopub_socket: Any) -> None:
            if self.display_hook_factory:
                hook: Any = self.display_hook_factory(self.session, iopub_socket)
                hook.topic = f"engine.{self.id}.execute_result".encode("ascii")
                sys.displayhook = hook
            self.kernel.shell.displayhook.topic = f"engine.{self.id}.execute_result".encode("ascii")

        def restore_output(self) -> None:
            pass

    try:
        SessionEngine.launch_instance(argv=engine_argv(sd, rank))
    except RuntimeError as e:
        # SIGTERM (the session stops) ends the engine's loop under its registration.
        if "Event loop stopped" not in str(e):
            raise
    finally:
        teardown(job_dir, rank)


if __name__ == "__main__":
    main(sys.argv[1:])
