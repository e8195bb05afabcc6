"""The job directory: the one place a job's files live, on every backend.

Layout of ``<ALCHEMIST_HOME>/jobs/<job_id>/``::

    spec.json                      the JobSpec (written once, at submission)
    record.json                    the index row as submitted (owner, name, created)
    bundle/                        the shipped cell: source.py, namespace.pkl, manifest.json
    state.json                     the launcher's view of the job (state, reason, exit code)
    logs/rank-<r>.log              each rank's stdout and stderr, appended across restarts
    logs/launcher.log              the launcher's own output (torchrun, the supervisor)
    metrics/rank-<r>.jsonl         rank r's metric events, one JSON object a line
    metrics/system-rank-<r>.jsonl  rank r's system metrics (CPU, memory, network, GPU)
    tensorboard/                   TensorBoard event files
    checkpoints/                   checkpoints written by rank 0
    outputs.pkl                    the values named with ``--outputs``, pickled by rank 0
    pids/                          pid files of the launcher and each rank (local backend)
    launch.json                    the launch request (local backend)
    restarts                       the worker group's restart count
    cancel-requested               asks the launcher to cancel (local backend)
    outcomes/rank-<r>.json         what rank r's code did (alchemist.job.outcomes)
    debug/                         stacks, watchdog reports, recorder dumps (alchemist.diagnosis)
    session/                       an interactive session's files (alchemist.job.session)

Writers that others read while they write (state, checkpoints, outputs) write a
temporary file and rename it, so a reader never sees half a file.

A job's files are its owner's alone: the job directory, every folder Alchemist makes in
it and the jobs folder above it are created 0700 (:func:`make_private_dir`: ``mkdir``'s
mode, which the umask can only narrow, so there is no moment when they are open), and
the files written through :func:`atomic_write_bytes` are 0600 (``mkstemp``).

Files that grow while the job runs (rank logs, metrics) have one writer host each: the
rank that owns the file (and its forked children, on the same host). On Kubernetes the
job directory is on NFS, where appends from several hosts to one file are not atomic:
each client writes at the end of the file as it last saw it, so two pods appending at
once overwrite each other's bytes and events are lost. Earlier versions wrote every
rank's events to one ``metrics.jsonl`` (and ``system.jsonl``); those files are still
read (:meth:`JobDir.shared_metrics`), never written.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The reason of a job cancelled with no other reason given.
CANCELLED_BY_USER = "cancelled by the user"


def make_private_dir(path: Path) -> Path:
    """Create ``path`` and each missing folder above it with mode 0700; returns ``path``.

    Each folder is made with ``mkdir(mode=0o700)``: the umask can only narrow that mode,
    so no folder is ever open to others, not even for a moment (a ``chmod`` after the
    ``mkdir`` would leave one). Folders that exist already are left as they are.
    """
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            if not folder.is_dir():  # a file in the way: the same error mkdir -p gives
                raise
    return path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a part.

    The file is 0600 (``mkstemp``'s mode) and folders it needs are made 0700.
    """
    make_private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=2, sort_keys=True).encode())


#: ``state.json``, the job's state as its launcher or backend records it: these fields,
#: plus one section (an object) per backend for its own bookkeeping (``"kubernetes"``).
#: Every backend writes it the same way, so readers need not know which one ran a job.
STATE_FIELDS: dict[str, tuple[type, ...]] = {
    "state": (str,),  # a JobState value
    "reason": (str, type(None)),  # one line: why it failed, was cancelled, or waits
    "exit_code": (int, type(None)),
    "started": (float, int, type(None)),
    "finished": (float, int, type(None)),
    "supervisor_pid": (int,),
    "backend": (str,),
    # each restart: {"attempt": the attempt that ended (from 1), "cause": one line, "time"}
    "restart_causes": (list,),
}


def check_state_fields(fields: dict[str, Any]) -> None:
    """Raise ``ValueError`` unless ``fields`` fit the ``state.json`` schema."""
    from alchemist.job.spec import JobState

    for key, value in fields.items():
        types = STATE_FIELDS.get(key)
        if types is None:
            if not isinstance(value, dict):
                raise ValueError(f"state.json has no field {key!r} (a backend's is an object)")
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            raise ValueError(f"state.json field {key!r} cannot be {value!r}")
        if key == "state":
            JobState(value)  # ValueError for a state that does not exist


#: Name prefix of the per-rank system metric files in ``metrics/``.
SYSTEM_PREFIX = "system-"


@dataclass(frozen=True)
class JobDir:
    """Paths inside one job directory."""

    root: Path

    @property
    def job_id(self) -> str:
        return self.root.name

    @property
    def spec(self) -> Path:
        return self.root / "spec.json"

    @property
    def record(self) -> Path:
        """``record.json``: the job's index row as submitted (id, owner, name, backend,
        created), so that a job whose row is missing is indexed again."""
        return self.root / "record.json"

    @property
    def bundle(self) -> Path:
        return self.root / "bundle"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def rank_log(self, rank: int) -> Path:
        return self.logs / f"rank-{rank}.log"

    @property
    def launcher_log(self) -> Path:
        return self.logs / "launcher.log"

    @property
    def metrics_dir(self) -> Path:
        """The folder of the per-rank metric files."""
        return self.root / "metrics"

    def rank_metrics(self, rank: int, *, system: bool = False) -> Path:
        """Rank ``rank``'s metric events (``system=True``: its system metrics)."""
        return self.metrics_dir / f"{SYSTEM_PREFIX if system else ''}rank-{rank}.jsonl"

    def metrics_by_rank(self, *, system: bool = False) -> dict[int, Path]:
        """The per-rank metric files that exist now (``system=True``: system metrics)."""
        prefix = f"{SYSTEM_PREFIX if system else ''}rank-"
        found: dict[int, Path] = {}
        try:
            names = os.listdir(self.metrics_dir)
        except (FileNotFoundError, NotADirectoryError):
            return found
        for name in names:
            if not (name.startswith(prefix) and name.endswith(".jsonl")):
                continue
            rank = name[len(prefix) : -len(".jsonl")]
            if rank.isdigit():
                found[int(rank)] = self.metrics_dir / name
        return dict(sorted(found.items()))

    def shared_metrics(self, *, system: bool = False) -> Path:
        """The one file all ranks appended to before per-rank files (read, never written)."""
        return self.root / ("system.jsonl" if system else "metrics.jsonl")

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def outputs(self) -> Path:
        return self.root / "outputs.pkl"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    def rank_pid(self, rank: int) -> Path:
        """Rank ``rank``'s pid file (local backend)."""
        return self.pids / f"rank-{rank}.pid"

    @property
    def launcher_pid(self) -> Path:
        """The launcher's pid file (local backend: the supervisor)."""
        return self.pids / "launcher.pid"

    @property
    def torchrun_pid(self) -> Path:
        """The pid file of a cold job's torchrun (local backend)."""
        return self.pids / "torchrun.pid"

    @property
    def launch(self) -> Path:
        """``launch.json``: the launch request the dry run made (local backend)."""
        return self.root / "launch.json"

    @property
    def restarts(self) -> Path:
        """How many times the worker group restarted (written by rank 0 of each attempt)."""
        return self.root / "restarts"

    @property
    def cancel_marker(self) -> Path:
        """Asks the job's launcher to cancel the job (local backend); its text, if any,
        is why (:meth:`cancel_reason`)."""
        return self.root / "cancel-requested"

    def request_cancel(self, reason: str | None = None) -> None:
        """Write the cancel marker, with ``reason`` (one line) as the job's final reason."""
        atomic_write_bytes(self.cancel_marker, (reason or "").encode())

    def cancel_reason(self) -> str:
        """Why the job was cancelled: the cancel marker's text (a sweep's pruning, say),
        else :data:`CANCELLED_BY_USER`."""
        try:
            text = self.cancel_marker.read_text(errors="replace").strip()
        except OSError:
            text = ""
        return text.splitlines()[0][:500] if text else CANCELLED_BY_USER

    @property
    def outcomes(self) -> Path:
        """The folder of the ranks' outcome records (:mod:`alchemist.job.outcomes`)."""
        return self.root / "outcomes"

    def rank_outcome(self, rank: int) -> Path:
        return self.outcomes / f"rank-{rank}.json"

    @property
    def debug(self) -> Path:
        """What diagnosis writes: stacks, watchdog reports, hook markers, recorder dumps."""
        return self.root / "debug"

    def create(self) -> JobDir:
        """Make the job directory and its folders, each 0700 from the start (the jobs
        folder above it too, when it is missing)."""
        for sub in (
            self.root,
            self.bundle,
            self.logs,
            self.metrics_dir,
            self.tensorboard,
            self.checkpoints,
            self.pids,
        ):
            make_private_dir(sub)
        return self

    def read_state(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.state.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def write_state(self, **fields: Any) -> None:
        """Update ``state.json`` with ``fields`` (checked against :data:`STATE_FIELDS`).

        Raises:
            ValueError: a field that is not in the record's schema, or of the wrong
                type (a programming error, not a user's).
        """
        check_state_fields(fields)
        current = self.read_state() or {}
        current.update(fields)
        atomic_write_json(self.state, current)

    def ranks_with_logs(self) -> list[int]:
        ranks = []
        for p in self.logs.glob("rank-*.log"):
            try:
                ranks.append(int(p.stem.split("-", 1)[1]))
            except ValueError:
                continue
        return sorted(ranks)
