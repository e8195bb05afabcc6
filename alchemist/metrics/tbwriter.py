"""Turn a job's metric events into TensorBoard event files, in a process of its own.

Why a separate process: writing TensorBoard events costs ~100-200 µs of pure-Python
CPU per logged step (protobuf building, the record CRC) and, on a thread of the
training process, it competes for the GIL with the training loop: measured on a 5 ms
step, +12 % CPU and +40 % wall time (benchmarks/metrics_latency.py). Here it runs on
another core, never on the training thread, and the scalars are converted from the
same files the monitor reads (every rank's ``metrics/rank-<r>.jsonl``), so both show
the same values.

Rank 0's :class:`~alchemist.metrics.reporter.Reporter` starts it as
``python -m alchemist.metrics.tbwriter JOB_DIR`` with a pipe on its stdin and ends it
by writing ``q`` to it (end-of-file, or the worker's death, ends it too; ``f`` asks for
a conversion now). It converts every rank's events: rank 0 in ``<job_dir>/tensorboard/``
(TensorBoard's run ``.``), rank ``r`` in ``tensorboard/rank-<r>/``; tags are the metric
names except ``total_steps`` and ``batch_size``. It reads every ``--interval`` seconds
(default 1), flushes after each read, and keeps its reader's cursor (the offset reached
in each rank's file) in ``tensorboard/.cursor`` (under ``tensorboard/.lock``) so that a
restarted job (a new rank 0) or a catch-up conversion when TensorBoard is opened goes on
where the previous one stopped, without duplicates. After a restart the redone steps
show the newest attempt's values: the first event of a newer attempt writes a
``SessionLog.START`` at its step, from which TensorBoard purges the older values
(:mod:`alchemist.metrics.attempts`). SIGTERM, or end-of-file on stdin, makes it convert
what is left and exit.

Each conversion reads at most :data:`CHUNK_BYTES` of events at a time, so a writer that
fell behind (or a job that logged gigabytes) is converted chunk by chunk in bounded
memory. The catch-up when TensorBoard is opened (:func:`catch_up`) spends at most
:data:`CATCH_UP_BUDGET_S` seconds, in the process that opens it (the kernel, the
Jupyter server); what is left is converted by ``python -m alchemist.metrics.tbwriter
JOB_DIR --drain``, started detached, while TensorBoard already shows the first part.

Written with tensorboard's own ``EventFileWriter`` (what ``torch.utils.tensorboard``'s
``SummaryWriter`` wraps), so this process does not import torch.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from alchemist.errors import CursorError
from alchemist.job.jobdir import JobDir, atomic_write_bytes, atomic_write_json
from alchemist.metrics.attempts import AttemptTracker
from alchemist.metrics.events import META_KEYS
from alchemist.metrics.reader import MetricsReader
from alchemist.metrics.reporter import tensorboard_run_dir
from alchemist.metrics.summary import SummaryKeeper

CURSOR_FILE = ".cursor"
#: Each rank's newest attempt converted so far (JSON), kept beside the cursor.
ATTEMPTS_FILE = ".attempts"
LOCK_FILE = ".lock"
#: Held (flock) by the running writer for its whole life.
WRITER_FILE = ".writer"
#: The most one conversion reads at once (bytes of events, shared between the ranks).
CHUNK_BYTES = 4 << 20
#: The most :func:`catch_up` converts for, in the caller's process (seconds).
CATCH_UP_BUDGET_S = 5.0


class EventConverter:
    """Converts every rank's metric events into per-rank event files."""

    def __init__(self, job_dir: JobDir) -> None:
        self.job_dir = job_dir
        self.reader = MetricsReader(job_dir)
        self.cursor_path = job_dir.tensorboard / CURSOR_FILE
        self.attempts_path = job_dir.tensorboard / ATTEMPTS_FILE
        self.lock_path = job_dir.tensorboard / LOCK_FILE
        self.cursor = ""
        #: whether the last :meth:`sync` left events already written unread
        self.more = False
        self._writers: dict[int, Any] = {}

    def _writer(self, rank: int) -> Any:
        w = self._writers.get(rank)
        if w is None:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter

            logdir = tensorboard_run_dir(self.job_dir.tensorboard, rank)
            logdir.mkdir(parents=True, exist_ok=True)
            w = self._writers[rank] = EventFileWriter(str(logdir), max_queue_size=1000)
        return w

    def sync(self, max_bytes: int | None = CHUNK_BYTES) -> int:
        """Convert the events written since the last conversion (by any process), up
        to ``max_bytes`` of them (:attr:`more` says whether more were waiting).

        The cursor file is read and written under an exclusive lock, so the running
        writer and :func:`alchemist.tensorboard.open_tensorboard`'s catch-up sync never
        convert an event twice.

        Returns:
            How many events were read.
        """
        self.job_dir.tensorboard.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                return self._sync_locked(max_bytes)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _load_attempts(self, fresh: bool) -> AttemptTracker:
        if fresh:
            return AttemptTracker()
        try:
            seen = json.loads(self.attempts_path.read_text())
            return AttemptTracker({int(k): int(v) for k, v in seen.items()})
        except (OSError, ValueError, AttributeError):
            return AttemptTracker()

    def _sync_locked(self, max_bytes: int | None) -> int:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary

        try:
            self.cursor = self.cursor_path.read_text().strip()
        except OSError:
            self.cursor = ""
        try:
            events, cursor, self.more = self.reader.read_chunk(self.cursor, max_bytes)
        except CursorError:  # a stray edit of the file: start over, as a missing file does
            events, cursor, self.more = self.reader.read_chunk(None, max_bytes)
        attempts = self._load_attempts(fresh=not self.cursor)
        before = dict(attempts.seen)
        written: set[int] = set()
        for e in events:
            cut = attempts.restart_at(e)
            if cut is not None:
                # A restarted attempt redoes steps from `cut`: TensorBoard purges what an
                # earlier session logged at steps >= a SessionLog.START's step.
                start = Event(
                    wall_time=float(e.get("time") or 0.0),
                    step=cut,
                    session_log=SessionLog(status=SessionLog.START),
                )
                self._writer(int(e["rank"])).add_event(start)
                written.add(int(e["rank"]))
            values = [
                Summary.Value(tag=name, simple_value=float(v))
                for name, v in e["values"].items()
                if name not in META_KEYS
            ]
            if not values or e.get("step") is None:
                continue
            rank = int(e["rank"])
            event = Event(
                wall_time=float(e.get("time") or 0.0),
                step=int(e["step"]),
                summary=Summary(value=values),
            )
            self._writer(rank).add_event(event)
            written.add(rank)
        for rank in written:
            self._writers[rank].flush()
        if attempts.seen != before:
            atomic_write_json(self.attempts_path, {str(k): v for k, v in attempts.seen.items()})
        if cursor != self.cursor:
            self.cursor = cursor
            atomic_write_bytes(self.cursor_path, str(cursor).encode())
        return len(events)

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()


def _refresh(keeper: SummaryKeeper, force_save: bool = False) -> None:
    try:
        keeper.refresh(force_save=force_save)
    except Exception:  # a summary is a cache: a failure costs a later reader a pass
        pass


def run(job_root: Path, interval: float = 1.0, stdin_fd: int | None = 0) -> None:
    """Convert until stdin reaches end-of-file or SIGTERM arrives, then drain and return."""
    job_dir = JobDir(job_root)
    job_dir.tensorboard.mkdir(parents=True, exist_ok=True)
    alive = open(job_dir.tensorboard / WRITER_FILE, "a+b")  # noqa: SIM115 - held until exit
    fcntl.flock(alive.fileno(), fcntl.LOCK_EX)  # one writer per job at a time
    converter = EventConverter(job_dir)
    # The summaries of alchemist.metrics.summary, kept current from here (off the
    # training process), so a first view of a long job reads them and a few seconds.
    keeper = SummaryKeeper(MetricsReader(job_dir))
    stopping = False

    def on_term(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    # A signal must end the wait at once: select() is retried after a handler runs
    # (PEP 475), so without this a SIGTERM waited out the interval, and every cancelled
    # job (its ranks wait for this process) took a second longer to end.
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    woken = False
    with contextlib.suppress(ValueError):  # not the main thread: no signal reaches us
        signal.set_wakeup_fd(wake_w)
        woken = True
    waits = [wake_r] if stdin_fd is None else [wake_r, stdin_fd]
    parent = os.getppid()
    try:
        while not stopping:
            while converter.sync() and converter.more and not stopping:
                pass  # behind: the next chunk at once
            _refresh(keeper)
            if os.getppid() != parent:
                break  # the worker died (we were re-parented)
            ready, _, _ = select.select(waits, [], [], interval)
            if stdin_fd is not None and stdin_fd in ready:
                data = os.read(stdin_fd, 4096)
                if not data or b"q" in data:
                    break  # the reporter closed (or its process died)
                # anything else ("f"): convert now, at the top of the loop
        while converter.sync():  # what is left
            pass
        _refresh(keeper, force_save=True)
    finally:
        converter.close()
        alive.close()
        if woken:
            signal.set_wakeup_fd(-1)
        os.close(wake_r)
        os.close(wake_w)


def catch_up(job_root: Path, budget_s: float = CATCH_UP_BUDGET_S) -> bool:
    """Convert events no writer has converted yet, when no writer runs for the job, for
    at most ``budget_s`` seconds; the rest is left to a detached ``--drain`` process.

    TensorBoard reads a run's event files in name order, so a second file must not be
    written while the job's own writer still appends to the first: when the writer is
    alive this does nothing (it converts within a second anyway).

    Returns:
        Whether it converted (False: a writer is running).
    """
    job_dir = JobDir(job_root)
    if not job_dir.root.is_dir():
        return False
    job_dir.tensorboard.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + budget_s
    with open(job_dir.tensorboard / WRITER_FILE, "a+b") as alive:
        try:
            fcntl.flock(alive.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        converter = EventConverter(job_dir)
        try:
            while converter.sync() and converter.more and time.monotonic() < deadline:
                pass
        finally:
            converter.close()
    if converter.more:  # the writer's lock is free again: the drain takes it
        subprocess.Popen(
            [sys.executable, "-m", "alchemist.metrics.tbwriter", str(job_dir.root), "--drain"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    return True


def drain(job_root: Path) -> None:
    """Convert everything left, unless a writer runs for the job (it will), and exit."""
    job_dir = JobDir(job_root)
    with open(job_dir.tensorboard / WRITER_FILE, "a+b") as alive:
        try:
            fcntl.flock(alive.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return
        converter = EventConverter(job_dir)
        try:
            while converter.sync():
                pass
        finally:
            converter.close()
        _refresh(SummaryKeeper(MetricsReader(job_dir)), force_save=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m alchemist.metrics.tbwriter")
    p.add_argument("job_dir", type=Path)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--drain", action="store_true", help="convert what is left, then exit")
    args = p.parse_args(argv)
    with contextlib.suppress(OSError):
        os.nice(10)  # converting for TensorBoard must not slow the training ranks
    if args.drain:
        drain(args.job_dir)
    else:
        run(args.job_dir, args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
