"""What each rank's code did, recorded by the rank itself, and the job's outcome from it.

A rank writes ``outcomes/rank-<r>.json`` (``{rank, attempt, status, time}``) as soon as
its code has finished (the cell ran, the algorithms closed, rank 0 saved the outputs),
*before* the interpreter tears down. So:

- a run whose every rank recorded status 0 in the latest attempt finished its work,
  even if a rank then aborted at interpreter exit (torch 2.13 with gloo, about 1 run
  in 20: ``terminate called without an active exception``) or the supervisor was
  killed while the ranks ran on: such a job is never reported failed;
- a rank that has no record in the latest attempt died before its code finished: it
  was killed (a signal, the out-of-memory killer) or crashed in C. When that happens
  the others fail next, of their lost peer ("Connection closed by peer"); the failure
  is put on the rank that died, with how (torchrun's own account of its exit code).

It imports neither torch nor the job store: the supervisor uses it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alchemist.job.jobdir import JobDir, atomic_write_json


@dataclass(frozen=True)
class RankOutcome:
    """One rank's record: its code ended with ``status`` (0: success) at ``time``."""

    rank: int
    attempt: int
    status: int
    time: float


def ranks_detail(job_dir: JobDir) -> dict[str, Any]:
    """What each rank's code did, for a job's status (``JobStatus.ranks``): per rank
    that ended, ``{"state": "finished" | "failed", "exit_status", "attempt", "ended"}``
    (``attempt`` counts from 1, as the rank logs say it)."""
    return {
        str(o.rank): {
            "state": "finished" if o.status == 0 else "failed",
            "exit_status": o.status,
            "attempt": o.attempt + 1,
            "ended": o.time,
        }
        for o in sorted(read(job_dir).values(), key=lambda o: o.rank)
    }


def outcome_path(job_dir: JobDir, rank: int) -> Path:
    return job_dir.rank_outcome(rank)


def record(job_dir: JobDir, rank: int, attempt: int, status: int) -> None:
    """Record that ``rank``'s code ended with ``status`` (call before teardown)."""
    data = {"rank": rank, "attempt": attempt, "status": status, "time": time.time()}
    atomic_write_json(outcome_path(job_dir, rank), data)


def read(job_dir: JobDir) -> dict[int, RankOutcome]:
    """Every rank's latest record (a rank's record is replaced by each attempt)."""
    out: dict[int, RankOutcome] = {}
    folder = job_dir.outcomes
    for path in sorted(folder.glob("rank-*.json")) if folder.is_dir() else []:
        try:
            d = json.loads(path.read_text())
            o = RankOutcome(int(d["rank"]), int(d["attempt"]), int(d["status"]), float(d["time"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a torn or foreign file proves nothing
        out[o.rank] = o
    return out


def latest_attempt(job_dir: JobDir, outcomes: dict[int, RankOutcome]) -> int:
    try:
        restarts = int((job_dir.restarts).read_text().strip() or 0)
    except (OSError, ValueError):
        restarts = 0
    return max([restarts, *(o.attempt for o in outcomes.values())])


def work_finished(job_dir: JobDir, world_size: int) -> bool:
    """Whether every rank's code finished with status 0 in the job's latest attempt."""
    outcomes = read(job_dir)
    attempt = latest_attempt(job_dir, outcomes)
    return all(
        (o := outcomes.get(rank)) is not None and o.attempt == attempt and o.status == 0
        for rank in range(world_size)
    )


#: Seconds the ranks may spend in teardown (interpreter exit, atexit handlers, the process
#: group's destruction) once every rank has recorded that its code finished; then those
#: still running are stopped and the job succeeds (``ALCHEMIST_TEARDOWN_S`` sets it).
TEARDOWN_S = 60.0


def teardown_s() -> float:
    raw = os.environ.get("ALCHEMIST_TEARDOWN_S", "")
    try:
        return max(0.0, float(raw)) if raw.strip() else TEARDOWN_S
    except ValueError:
        return TEARDOWN_S


def teardown_overdue(job_dir: JobDir, world_size: int, now: float | None = None) -> float | None:
    """Seconds since the last rank recorded that its code finished, when every rank's code
    finished (status 0, latest attempt) more than :func:`teardown_s` ago; else None."""
    outcomes = read(job_dir)
    attempt = latest_attempt(job_dir, outcomes)
    mine = [outcomes.get(rank) for rank in range(world_size)]
    if not world_size or any(o is None or o.attempt != attempt or o.status != 0 for o in mine):
        return None
    since = (time.time() if now is None else now) - max(o.time for o in mine if o is not None)
    return since if since > teardown_s() else None


# torchrun's closing report names the "first observed failure":
#   Root Cause (first observed failure):
#   [0]:
#     rank      : 1 (local_rank: 1)
#     exitcode  : -9 (pid: 9223)  (SIGKILL)
_FAILURE_RE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")


def torchrun_exit_codes(launcher_log: str) -> dict[int, int]:
    """Rank → exit code from torchrun's last failure report in ``launcher_log``."""
    start = launcher_log.rfind("Failures:")
    report = launcher_log[start:] if start >= 0 else launcher_log
    return {int(r): int(code) for r, code in _FAILURE_RE.findall(report)}


def exit_codes_path(job_dir: JobDir) -> Path:
    """Rank → exit code of the latest attempt, as a launcher that saw them wrote them
    (the warm pool's supervisor; torchrun's are in its report instead)."""
    return job_dir.pids / "exit-codes.json"


def record_exit_codes(job_dir: JobDir, attempt: int, codes: dict[int, int]) -> None:
    atomic_write_json(
        exit_codes_path(job_dir),
        {"attempt": attempt, "codes": {str(r): c for r, c in codes.items()}},
    )


def exit_codes(job_dir: JobDir) -> dict[int, int]:
    """The ranks' exit codes that are known: the warm launcher's record, else torchrun's
    last report in the launcher log."""
    try:
        data = json.loads(exit_codes_path(job_dir).read_text())
        return {int(r): int(c) for r, c in data["codes"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    try:
        return torchrun_exit_codes(job_dir.launcher_log.read_text(errors="replace"))
    except OSError:
        return {}


def how_ended(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"was killed by signal {-code} ({name}){hint}"
    return f"exited with status {code} before its code finished"


def died_first(
    job_dir: JobDir, world_size: int, launcher_log: str = "", codes: dict[int, int] | None = None
) -> str | None:
    """One line naming the rank that died before its code finished, and how; None when
    every rank's code ended on its own (a failure in the code: see its log).

    The ranks' exit codes come from torchrun's report in ``launcher_log``, or are given
    as ``codes`` (rank → code, negative for a signal) by a launcher that saw them."""
    outcomes = read(job_dir)
    attempt = latest_attempt(job_dir, outcomes)
    missing = [
        r for r in range(world_size) if (o := outcomes.get(r)) is None or o.attempt != attempt
    ]
    if not missing:
        return None
    if codes is None:
        codes = torchrun_exit_codes(launcher_log)
    if any(o.attempt == attempt and o.status != 0 for o in outcomes.values()):
        # A rank's code failed, and the launcher stopped the others (SIGTERM) before they
        # noticed: the failure in the code is the cause (see that rank's log), not them.
        missing = [r for r in missing if codes.get(r) != -signal.SIGTERM]
        if not missing:
            return None
    # When one rank dies, torchrun stops the others with SIGTERM: a rank that was killed
    # by anything else died first, whatever order the report lists them in.
    # A rank that exited on its own (os._exit(3)) was not stopped either.
    killed = (
        [r for r in missing if codes.get(r, 0) < 0 and codes[r] != -signal.SIGTERM]
        or [r for r in missing if codes.get(r, 0) > 0]
        or [r for r in missing if codes.get(r, 0) < 0]
        or [r for r in missing if r in codes]
    )
    rank = killed[0] if killed else missing[0]
    if rank in codes:
        return f"rank {rank} {how_ended(codes[rank])}"
    return f"rank {rank} died before its code finished (no exit status recorded)"


_EXIT_RE = re.compile(r"^\[alchemist\] rank (\d+) exited with status (-?\d+)")


def _error_line(job_dir: JobDir, rank: int) -> str | None:
    """The last line before rank ``rank``'s last failed exit in its log (the exception,
    ``RuntimeError: ...``), "" when there is none; None when the log shows no failure."""
    try:
        lines = job_dir.rank_log(rank).read_text(errors="replace").splitlines()
    except OSError:
        return None
    for i in range(len(lines) - 1, -1, -1):
        m = _EXIT_RE.match(lines[i])
        if m and m.group(2) != "0":
            return next(
                (ln.strip() for ln in reversed(lines[:i]) if ln.strip() and not ln.startswith(" ")),
                "",
            )
    return None


def failure_reason(job_dir: JobDir, rc: int | None) -> str:
    """One line saying why the job failed, from the log of the rank that failed first
    (by its outcome record; the others often fail next, of the lost peer)."""
    recorded = read(job_dir)
    failed_first = sorted((o.time, o.rank) for o in recorded.values() if o.status != 0)
    order = [r for _, r in failed_first]
    for rank in order + [r for r in job_dir.ranks_with_logs() if r not in order]:
        detail = _error_line(job_dir, rank)
        if detail is not None:
            return f"rank {rank} failed: {detail}" if detail else f"rank {rank} failed"
    return f"the launcher exited with status {rc}; see logs/launcher.log"


#: torchrun's line for the worker whose failure ends an attempt.
_TORCHRUN_FAILED_RE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: \d+\)")


#: What a rank's error says when it failed only because a peer was lost (the cause is
#: the peer: a rank that died, or whose code failed, first).
_LOST_PEER = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "remote worker crashing",
    "NCCL communicator was aborted",
    "Socket Timeout",
)


def restart_cause(
    job_dir: JobDir,
    attempt: int,
    world_size: int,
    launcher_log: str = "",
    codes: dict[int, int] | None = None,
) -> str:
    """One line saying why attempt ``attempt`` (from 0) ended before the job's work.

    In order: a rank whose code failed with its own error (not a lost peer's); a rank
    that died before its code finished, and how (its exit code from ``codes``, rank →
    code as a launcher saw them, or torchrun's last ``failed (exitcode: ...)`` line in
    ``launcher_log``); a rank whose code failed of a lost peer.
    """
    recorded = {o.rank: o for o in read(job_dir).values() if o.attempt == attempt}
    failed = sorted((o.time, o.rank) for o in recorded.values() if o.status)
    errors = {rank: _error_line(job_dir, rank) or "" for _, rank in failed}
    own = [r for _, r in failed if not any(mark in errors[r] for mark in _LOST_PEER)]
    if own:
        return f"rank {own[0]}'s code failed" + (f": {errors[own[0]]}" if errors[own[0]] else "")
    if codes is None:
        found = _TORCHRUN_FAILED_RE.findall(launcher_log)
        codes = {int(found[-1][1]): int(found[-1][0])} if found else {}
    died = [r for r in range(world_size) if r not in recorded]
    known = [r for r in died if codes.get(r) and codes[r] != -signal.SIGTERM]
    if known:
        return f"rank {known[0]} {how_ended(codes[known[0]])}"
    if died:
        return f"rank {died[0]} died before its code finished"
    if failed:
        rank = failed[0][1]
        return f"rank {rank}'s code failed: {errors[rank]}"
    return "a rank ended before its code finished"


def note_restart(job_dir: JobDir, attempt: int, cause: str, max_restarts: int) -> str:
    """Keep why attempt ``attempt`` (from 0) ended in ``state.json`` (``restart_causes``),
    and say it in rank 0's log, where the follower and the monitor show it; returns the
    line said."""
    state = job_dir.read_state() or {}
    causes = [c for c in state.get("restart_causes") or [] if c.get("attempt") != attempt + 1]
    causes.append({"attempt": attempt + 1, "cause": cause, "time": time.time()})
    line = (
        f"[alchemist] attempt {attempt + 1} ended: {cause}; restarting the workers"
        f" (restart {attempt + 1} of {max_restarts})"
    )
    job_dir.write_state(
        restart_causes=causes, reason=f"restarted after attempt {attempt + 1}: {cause}"
    )
    try:
        fd = os.open(job_dir.rank_log(0), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass
    return line


def restarts_summary(job_dir: JobDir) -> str | None:
    """One line on the job's restarts for a job that ended well (None: there were none)."""
    causes = (job_dir.read_state() or {}).get("restart_causes") or []
    if not causes:
        return None
    last = causes[-1]
    times = f" {len(causes)} times, last" if len(causes) > 1 else ""
    return f"restarted{times} after attempt {last['attempt']}: {last['cause']}"
