"""The worker-side metrics reporter: ``alchemist.log(step, **values)`` ends here.

Event shape (one JSON object a line in ``<job_dir>/metrics/rank-<r>.jsonl``)::

    {"job_id": "j-1a2b", "rank": 0, "attempt": 0, "step": 12, "time": 1764700000.25,
     "values": {"loss": 0.53, "lr": 0.1}}

``attempt`` is torchrun's restart count (what the views use to show a redone step's
newest value, :mod:`alchemist.metrics.attempts`). ``time`` is UNIX seconds (float) when ``log`` was called. ``values`` maps a metric name
to a float; non-finite floats are written as ``NaN``/``Infinity`` (what Python's
``json`` module writes and reads back). System metrics (CPU, memory, network, GPU) are
not mixed in here: :mod:`alchemist.metrics.system` writes them to
``metrics/system-rank-<r>.jsonl`` in the same shape plus ``"kind": "system"`` and
``"host"``, so ``Job.metrics()`` and TensorBoard stay the user's own curves.

One file per rank, because a file must have one writer host: the job directory of a
Kubernetes job is on NFS, where ``O_APPEND`` from several hosts is not atomic (each
client writes at the end of the file as it last saw it), so ranks on different pods
appending to one shared file overwrite each other's bytes and events are lost, not
merely torn. A rank's forked children (DataLoader workers) run on its host and append
to its file. Readers read the set of rank files with one cursor
(:class:`alchemist.metrics.reader.MetricsReader`).

Two names are conventions the monitor understands and does not chart:
``total_steps`` (the number of steps the job will run, for the progress bar) and
``batch_size`` (samples per step on this rank, to show samples/s).

Guarantees:

- ``log`` converts the values to float and queues the event: that is all the training
  thread pays (a few microseconds). A writer thread appends the queued events every
  ``write_interval`` seconds (20 ms) with one ``os.write`` on a descriptor of the
  rank's file opened with ``O_APPEND``, so the rank's events and those of its forked
  children (all on one host) stay whole lines. ``flush`` and ``close`` write what is
  pending at once; a forked child (a DataLoader worker) writes each event at once. A
  worker killed with SIGKILL loses at most the last ``write_interval`` of events.
- TensorBoard scalars are never written on the training thread nor in the training
  process: rank 0's reporter starts :mod:`alchemist.metrics.tbwriter` as a child
  process (niced, once rank 0 first writes events), which converts every rank's
  events from their files into event files about once a second (rank 0:
  ``<job_dir>/tensorboard/``, TensorBoard's run ``.``;
  rank ``r > 0``: ``<job_dir>/tensorboard/rank-<r>/``; the tag is the metric name).
  ``close`` on rank 0 waits for it to convert what is left. (Measured: writing them on
  a thread of the training process cost +12 % CPU on a 5 ms step; see tbwriter.)
- With ``job_dir=None`` (a plain notebook, no job) events are kept in memory, the last
  ``memory_limit`` of them, so a prototype cell's curve can still be shown.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import math
import os
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alchemist.job.jobdir import JobDir

DEFAULT_MEMORY_LIMIT = 100_000
DEFAULT_TB_FLUSH_SECS = 1.0
DEFAULT_WRITE_INTERVAL = 0.02


def _to_float(name: str, value: Any) -> float:
    """Convert a metric value (float, int, numpy or 0-d/1-element torch tensor) to float."""
    if isinstance(value, float):
        return value
    if isinstance(value, bool):
        return float(value)
    try:
        return float(value)  # int, numpy scalar, one-element tensor (float() calls .item())
    except (TypeError, ValueError, RuntimeError) as e:
        raise TypeError(
            f"alchemist.log: metric {name!r} must be a number, got {type(value).__name__}; "
            "pass a float (for a tensor use .item())"
        ) from e


def tensorboard_run_dir(tensorboard_root: Path, rank: int) -> Path:
    """The TensorBoard run directory of ``rank`` (rank 0: the root itself)."""
    return tensorboard_root if rank == 0 else tensorboard_root / f"rank-{rank}"


class Reporter:
    """Writes metric events of one rank (see the module docstring for the contract).

    Args:
        job_dir: the job directory, or None to keep events in memory only.
        job_id: the job id written in each event (default: the job directory's name).
        rank: this process's global rank.
        tensorboard: rank 0 starts the TensorBoard writer process (job directory only).
        tb_flush_secs: how often that process converts new events.
        write_interval: seconds between the writer thread's appends to the file.
        memory_limit: how many events the in-memory mode keeps (the newest).
    """

    def __init__(
        self,
        job_dir: JobDir | None,
        job_id: str | None = None,
        rank: int = 0,
        *,
        tensorboard: bool = True,
        tb_flush_secs: float = DEFAULT_TB_FLUSH_SECS,
        write_interval: float = DEFAULT_WRITE_INTERVAL,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
    ) -> None:
        self.job_dir = job_dir
        self.job_id = job_id if job_id is not None else (job_dir.job_id if job_dir else None)
        self.rank = rank
        self.last_step: int | None = None
        self.write_interval = write_interval
        self._lock = threading.Lock()  # serialises drains (writer thread, flush, close)
        self._pending: collections.deque[tuple[int, float, dict[str, Any]]] = collections.deque()
        self._fd: int | None = None
        self._tb: subprocess.Popen[bytes] | None = None
        self._tb_wanted = False
        self._tb_interval = tb_flush_secs
        self._memory: collections.deque[dict[str, Any]] | None = None
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._keys: dict[str, str] = {}
        # The attempt (torchrun's restart count): a restarted job redoes steps, and the
        # views show the newest attempt's values for them (alchemist.metrics.attempts).
        self.attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
        self._prefix = (
            f'{{"job_id":{json.dumps(self.job_id)},"rank":{int(rank)},"attempt":{self.attempt},'
        )
        if job_dir is None:
            self._memory = collections.deque(maxlen=memory_limit)
            return
        job_dir.metrics_dir.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(
            job_dir.rank_metrics(rank), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
        )
        self._start_thread()
        _live_reporters.add(self)
        # Rank 0 starts the writer when it first writes events, not now: at start-up
        # the ranks need every core (measured: +0.5 s to the first step on 2 cores), and
        # a job that logs nothing needs no writer.
        self._tb_wanted = tensorboard and rank == 0

    @property
    def path(self) -> Path | None:
        """This rank's metrics file, or None in memory mode."""
        return self.job_dir.rank_metrics(self.rank) if self.job_dir else None

    def log(self, step: int, **values: Any) -> None:
        """Record ``values`` at ``step``.

        The event is appended to the file by the writer thread within
        ``write_interval`` seconds (at once by :meth:`flush` and :meth:`close`).

        Args:
            step: the training step (an int; the x axis of every curve).
            **values: metric name → number (float, int, numpy scalar, 1-element tensor);
                converted to float now, so a tensor changed later does not change it.

        Raises:
            TypeError: a value is not a number, or ``step`` is not an integer.
            RuntimeError: the reporter was closed.
        """
        self.log_values(step, values)

    def log_values(self, step: int, values: dict[str, Any]) -> None:
        """:meth:`log` with the values as a dict of the caller's that the reporter may
        keep and change (``alchemist.log`` hands over its keywords' dict, one copy less)."""
        if self._closed:
            raise RuntimeError("alchemist.log: the metrics reporter is closed")
        if type(step) is not int:
            try:
                step = int(step)
            except (TypeError, ValueError) as e:
                raise TypeError(
                    f"alchemist.log: step must be an integer, got {type(step).__name__}"
                ) from e
        for name, v in values.items():
            if type(v) is not float:
                values[name] = _to_float(name, v)
        self.last_step = step
        if self._memory is not None:
            self._memory.append(
                {
                    "job_id": self.job_id,
                    "rank": self.rank,
                    "attempt": self.attempt,
                    "step": step,
                    "time": time.time(),
                    "values": values,
                }
            )
            return
        # The hot path ends here: a deque append is atomic and never blocks.
        self._pending.append((step, time.time(), values))
        if self._thread is None:  # in a forked child (see _after_fork): write now
            self.flush()

    def _encode(self, step: int, now: float, floats: dict[str, float]) -> str:
        """The event's JSON line; equal to ``json.dumps`` of the event, ~5x faster.

        Finite floats are written with ``repr`` exactly as ``json`` does; key encodings
        are cached, since a job logs the same few names every step.
        """
        keys = self._keys
        parts = []
        for name, v in floats.items():
            key = keys.get(name)
            if key is None:
                key = keys[name] = json.dumps(name) + ":"
            # v - v == 0 is False exactly for NaN and ±inf, spelled as json spells them
            parts.append(key + (repr(v) if v - v == 0 else json.dumps(v)))
        return f'{self._prefix}"step":{step},"time":{now!r},"values":{{{",".join(parts)}}}}}\n'

    def flush(self) -> None:
        """Append every pending event to the file now (visible to readers on return)."""
        with self._lock:
            self._drain()

    def _drain(self) -> None:
        pending = self._pending
        if not pending or self._fd is None:
            return
        lines = []
        while pending:
            step, now, floats = pending.popleft()
            lines.append(self._encode(step, now, floats))
        # One write: an O_APPEND write from one host lands whole, so a forked child's
        # events never split this batch's lines (other ranks write other files).
        os.write(self._fd, "".join(lines).encode())
        # Not while closing: a rank being cancelled must not spawn a process; events
        # left unconverted are converted when TensorBoard opens (tbwriter.catch_up).
        if self._tb_wanted and self.job_dir is not None and not self._closed:
            self._tb_wanted = False
            self._tb = _start_tb_writer(self.job_dir, self._tb_interval)

    def _start_thread(self) -> None:
        def run() -> None:
            while not self._stop.wait(self.write_interval):
                if self._pending:
                    with self._lock:
                        try:
                            self._drain()
                        except OSError:  # the job directory went away
                            return

        self._thread = threading.Thread(target=run, name="alchemist-metrics", daemon=True)
        self._thread.start()

    def _after_fork(self) -> None:
        # A forked child (a DataLoader worker) has no writer thread: log writes at once.
        self._thread = None
        self._lock = threading.Lock()
        self._pending = collections.deque()  # the parent's pending events are the parent's
        self._tb = None  # the writer process belongs to the parent
        self._tb_wanted = False

    def events(self) -> list[dict[str, Any]]:
        """The events kept in memory (memory mode), or every event of the job (all ranks)."""
        if self._memory is not None:
            return list(self._memory)
        from alchemist.metrics.reader import MetricsReader

        self.flush()
        assert self.job_dir is not None
        return MetricsReader(self.job_dir).read_all()

    def tensorboard_sync(self) -> None:
        """Ask the TensorBoard writer process to convert now rather than at its next tick."""
        self.flush()
        if self._tb is not None and self._tb.stdin is not None:
            with contextlib.suppress(OSError):
                self._tb.stdin.write(b"f")
                self._tb.stdin.flush()

    def close(self, timeout: float = 30.0) -> None:
        """Write what is pending, close the file, and on rank 0 end the TensorBoard writer.

        Idempotent. The TensorBoard writer converts what is left before it exits; this
        waits at most ``timeout`` seconds for it, then kills it.
        """
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    self._drain()
                os.close(self._fd)
                self._fd = None
        _live_reporters.discard(self)
        proc, self._tb = self._tb, None
        if proc is not None:
            if proc.stdin is not None:
                # "q" rather than relying on end-of-file alone: a forked DataLoader
                # worker may still hold the pipe open.
                with contextlib.suppress(OSError):
                    proc.stdin.write(b"q")
                    proc.stdin.flush()
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_live_reporters: weakref.WeakSet[Reporter] = weakref.WeakSet()


def _reporters_after_fork() -> None:
    for reporter in list(_live_reporters):
        reporter._after_fork()


os.register_at_fork(after_in_child=_reporters_after_fork)


def _start_tb_writer(job_dir: JobDir, interval: float) -> subprocess.Popen[bytes] | None:
    """Start the TensorBoard writer process of ``job_dir`` (None if it cannot start)."""
    job_dir.logs.mkdir(parents=True, exist_ok=True)
    try:
        with open(job_dir.logs / "tensorboard-writer.log", "ab") as log:
            return subprocess.Popen(
                [
                    sys.executable, "-m", "alchemist.metrics.tbwriter", str(job_dir.root),
                    "--interval", str(interval),
                ],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
    except OSError:  # TensorBoard is a convenience: the jsonl file is the record
        return None


def is_finite_values(values: Mapping[str, float]) -> bool:
    """Whether every value is finite (NaN/inf are written but flagged by the monitor)."""
    return all(math.isfinite(v) for v in values.values())


_reporter: Reporter | None = None
_reporter_lock = threading.Lock()


def set_reporter(reporter: Reporter | None) -> Reporter | None:
    """Install ``reporter`` as the process's reporter; return the previous one (not closed)."""
    global _reporter
    with _reporter_lock:
        previous, _reporter = _reporter, reporter
    return previous


def get_reporter() -> Reporter:
    """The process's reporter, created on first use.

    Inside a job (``ALCHEMIST_JOB_DIR`` set) it writes to that job directory as rank
    ``RANK``; elsewhere (a plain notebook) it keeps events in memory. The runtime may
    install its own with :func:`set_reporter`. A reporter created here is closed at exit.
    """
    global _reporter
    with _reporter_lock:
        if _reporter is None:
            _reporter = reporter_from_env()
            atexit.register(_reporter.close)
        return _reporter


def reporter_from_env(environ: Mapping[str, str] | None = None) -> Reporter:
    """A reporter for the job named by ``ALCHEMIST_JOB_DIR``/``ALCHEMIST_JOB_ID``/``RANK``."""
    env = os.environ if environ is None else environ
    root = env.get("ALCHEMIST_JOB_DIR")
    rank = int(env.get("RANK", "0") or 0)
    if not root:
        return Reporter(None, env.get("ALCHEMIST_JOB_ID"), rank)
    return Reporter(JobDir(Path(root)), env.get("ALCHEMIST_JOB_ID"), rank)
