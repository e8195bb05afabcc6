"""One rank of a session: ``python -m alchemist.interactive.engine JOB_DIR RANK``.

On Kubernetes each rank is a pod of the session's Indexed Job, run as ``... JOB_DIR
$(JOB_COMPLETION_INDEX) --master-addr=<job>-0.<job> --master-port=P``: it takes its
environment from the session's config (:func:`pod_setup`), rank 0's pod serves the
store and the controller (:class:`PodHost`), and every pod ends itself when asked to
stop (:func:`watch_pod`).

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

from alchemist.job.jobdir import JobDir
from alchemist.job.session import SessionDir

_sampler: Any = None


def setup_rank(job_dir: JobDir) -> int:
    """Everything :func:`alchemist.runtime.worker.main` does before the cell; returns the rank."""
    global _sampler
    from alchemist.runtime import worker

    rank, world, _ = worker._rank_env()
    worker._redirect_output(job_dir.rank_log(rank))
    job_dir.pids.mkdir(exist_ok=True)
    (job_dir.rank_pid(rank)).write_text(str(os.getpid()))
    from alchemist.runtime import hooks, recorder

    recorder.enable()
    hooks.install(job_dir, rank)
    from alchemist.interactive.rankside import store_base

    store_base()  # remembered before the first group: rebuilds go under it
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
    from alchemist.metrics import reporter as reporter_mod
    from alchemist.runtime import hooks

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
        # The rank's folder (the notebook's, or the job's in a pod). ipyparallel's default
        # is the folder it was imported in: in a warm pool's zygote, the pool's.
        f"--IPEngine.work_dir={os.getcwd()}",
        f"--IPEngine.id={rank}",
        # The session's supervisor watches the engines: no nanny process per engine.
        "--IPEngine.enable_nanny=False",
        "--log-level=ERROR",
    ]


#: Seconds between two looks of a pod's engine at the stop marker (and the idle clock).
POD_WATCH_S = 0.5


class PodHost:
    """What rank 0's pod serves on Kubernetes besides its engine: the session's
    rendezvous store (every interface, the port of the Job's headless Service) and the
    ipyparallel controller (:mod:`alchemist.interactive.controller`, on every interface,
    dialled at ``location``). The other pods and the notebook reach both; the namespace's
    NetworkPolicy admits only the user's own pods, and every controller message is
    signed with the key in the session's 0600 connection files."""

    def __init__(self, job_dir: JobDir, port: int, location: str) -> None:
        import torch.distributed as dist

        from alchemist.backends.local.procs import spawn_logged

        # The store first: the other ranks dial it as soon as they start.
        self.store = dist.TCPStore(
            "127.0.0.1", port, is_master=True, wait_for_workers=False, use_libuv=True
        )
        self.controller = spawn_logged(
            ["-m", "alchemist.interactive.controller", str(job_dir.root), f"--location={location}"],
            job_dir.launcher_log,
            cwd=os.getcwd(),
        )

    def stop(self) -> None:
        import subprocess

        self.controller.terminate()
        try:
            self.controller.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.controller.kill()
            self.controller.wait()


def watch_pod(sd: SessionDir, cfg: dict[str, Any], rank: int) -> None:
    """A pod's engine ends itself, with status 0, when the session is asked to stop (the
    stop marker on the shared volume); when every pod ended so the Job completes. Rank
    0 also keeps the idle clock: it warns in ``session/notice`` and, past the grace,
    writes the stop marker with the reason."""
    import signal

    from alchemist.job.session import IdleClock

    clock = IdleClock(sd, cfg)
    while True:
        time.sleep(POD_WATCH_S)
        if sd.stop_marker.exists():
            os.kill(os.getpid(), signal.SIGTERM)  # ends the engine's loop, then teardown
            return
        if rank != 0:
            continue
        what, text = clock.tick()
        if what == "warn":
            sd.notice.write_text(text or "")
        elif what == "clear":
            sd.notice.unlink(missing_ok=True)
        elif what == "stop":
            sd.stop_marker.write_text(json.dumps({"state": "cancelled", "reason": text}))


def pod_setup(
    job_dir: JobDir, cfg: dict[str, Any], rank: int, opts: dict[str, str]
) -> PodHost | None:
    """Set up a pod's engine (``opts`` has ``master-addr`` and ``master-port``): the
    rank's environment from the session's config, rank 0's :class:`PodHost`, and the
    stop watch. Returns the host on rank 0."""
    import threading

    from alchemist.job.session import rank_env

    port, addr = int(opts["master-port"]), opts["master-addr"]
    os.environ.update(
        rank_env(cfg, job_dir.job_id, str(job_dir.root), rank, port, master_addr=addr, pod=True)
    )
    host = PodHost(job_dir, port, addr) if rank == 0 else None
    sd = SessionDir(job_dir)
    threading.Thread(target=watch_pod, args=(sd, cfg, rank), daemon=True).start()
    return host


def main(argv: list[str]) -> None:
    """``JOB_DIR RANK``, plus ``--master-addr=HOST --master-port=PORT`` in a pod."""
    job_dir = JobDir(Path(argv[0]))
    sd = SessionDir(job_dir)
    cfg = json.loads(sd.config.read_text())
    opts = dict(a[2:].split("=", 1) for a in argv[2:] if a.startswith("--") and "=" in a)
    host = pod_setup(job_dir, cfg, int(argv[1]), opts) if "master-addr" in opts else None
    rank = setup_rank(job_dir)
    wait_for_connection_file(sd, float(cfg["start_timeout"]))
    from ipyparallel.engine.app import IPEngine

    class SessionEngine(IPEngine):
        """An engine whose cell output stays on the rank's fds (its log)."""

        def redirect_output(self, iopub_socket: Any) -> None:
            if self.display_hook_factory:
                hook: Any = self.display_hook_factory(self.session, iopub_socket)
                hook.topic = f"engine.{self.id}.execute_result".encode("ascii")
                sys.displayhook = hook
            self.kernel.shell.displayhook.topic = f"engine.{self.id}.execute_result".encode("ascii")
            # The kernel now exists and has not started: add the signal handler.
            self.kernel.control_handlers["signal_request"] = self._signal_request

        def _signal_request(self, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
            """``Client.send_signal`` reaches the engine itself (ipyparallel's nanny,
            which would serve it, is off): on Kubernetes the notebook cannot signal a
            pod, so interrupts come this way, served by the engine's control thread
            while a cell runs in the main thread."""
            import signal

            sig = parent["content"]["sig"]
            sig = getattr(signal, sig) if isinstance(sig, str) else int(sig)
            os.kill(os.getpid(), sig)
            self.kernel.session.send(
                stream, "signal_reply", content={"status": "ok"}, parent=parent, ident=ident
            )

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
        if host is not None:
            host.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
