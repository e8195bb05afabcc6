"""The launcher of a local job: ``python -m alchemist.backends.local.supervisor JOB_DIR``.

It runs in a session of its own (so it outlives the kernel that submitted it), starts
torchrun exactly as recorded in ``launch.json`` by the dry run, enforces the timeout,
turns SIGTERM into a clean cancel, and writes the final state to ``state.json``.
It imports neither torch nor the job store, so it starts in milliseconds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from alchemist.backends.local.procs import CANCEL_MARKER, job_processes, terminate
from alchemist.jobdir import JobDir

_EXIT_RE = re.compile(r"^\[alchemist\] rank (\d+) exited with status (-?\d+)")


def failure_reason(job_dir: JobDir, rc: int | None) -> str:
    """One line saying why the job failed, from the ranks' logs."""
    for rank in job_dir.ranks_with_logs():
        try:
            lines = job_dir.rank_log(rank).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for i in range(len(lines) - 1, -1, -1):
            m = _EXIT_RE.match(lines[i])
            if m and m.group(2) != "0":
                detail = next(
                    (
                        ln.strip()
                        for ln in reversed(lines[:i])
                        if ln.strip() and not ln.startswith(" ")
                    ),
                    "",
                )
                return f"rank {rank} failed: {detail}" if detail else f"rank {rank} failed"
    return f"the launcher exited with status {rc}; see logs/launcher.log"


def main(argv: list[str]) -> int:
    job_dir = JobDir(Path(argv[0]))
    request = json.loads((job_dir.root / "launch.json").read_text())
    timeout = request.get("timeout")
    cancelled = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal cancelled
        cancelled = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    started = time.time()
    job_dir.write_state(state="running", started=started, supervisor_pid=os.getpid())
    env = {**os.environ, **request["env"]}
    proc = subprocess.Popen(request["argv"], env=env, cwd=request.get("cwd") or None)
    (job_dir.pids / "torchrun.pid").write_text(str(proc.pid))

    reason = None
    while True:
        try:
            rc = proc.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        if cancelled or (job_dir.root / CANCEL_MARKER).exists():
            cancelled = True
            reason = "cancelled by the user"
        elif timeout and time.time() - started > timeout:
            reason = f"timed out after {timeout:g} s (--timeout)"
        else:
            continue
        # torchrun forwards SIGTERM to its workers; stragglers are killed after the grace.
        terminate(job_processes(job_dir.root, [proc.pid]), grace=10.0)
        rc = proc.wait()
        break

    finished = time.time()
    if cancelled:
        job_dir.write_state(state="cancelled", reason=reason, exit_code=rc, finished=finished)
    elif reason:
        job_dir.write_state(state="failed", reason=reason, exit_code=rc, finished=finished)
    elif rc == 0:
        job_dir.write_state(state="succeeded", reason=None, exit_code=0, finished=finished)
    else:
        job_dir.write_state(
            state="failed", reason=failure_reason(job_dir, rc), exit_code=rc, finished=finished
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
