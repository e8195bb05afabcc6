"""The job model shared by every part of Alchemist.

A :class:`JobSpec` is what a user asks for (from a magic, the Python API, the CLI or
the side panel); a :class:`JobStatus` is what a backend reports back. Both are plain
dataclasses that round-trip through JSON, so the same spec is stored in the job store,
written to the job directory and sent over the REST API.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import keyword
import math
import re
from dataclasses import dataclass, field
from typing import Any

from alchemist.errors import SpecError
from alchemist.job.algorithms import ALGORITHMS
from alchemist.job.patterns import compile_patterns

__all__ = [
    "ALGORITHMS",
    "NUMBER_LIMITS",
    "JobSpec",
    "JobState",
    "JobStatus",
    "Resources",
    "number_problem",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Environment variables the runtime sets for every rank: a job's ``env`` may not
#: override them (``RANK=9`` gave a rank the wrong identity), nor preload code into
#: every process of the launcher.
RUNTIME_ENV = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "ROLE_NAME",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
    }
)
#: Prefixes of variables the runtime and its launchers own.
RUNTIME_ENV_PREFIXES = ("ALCHEMIST_", "TORCHELASTIC_", "HOROVOD_")

#: The valid range (inclusive) of each numeric job option, by option name: a value
#: outside it, or not a finite number (JSON's ``1e400`` reads as infinity), is refused
#: at submit by :meth:`JobSpec.validate`, whichever entry point it came from. The table
#: of :mod:`alchemist.job.options` shows these bounds (``--help``, the panel's form, the
#: REST schema). The highs are far beyond any real job; they stop a typo (``-n 100000``
#: pods) and numbers the backends cannot hold (a Kubernetes deadline is an int64).
NUMBER_LIMITS: dict[str, tuple[int, int]] = {
    "workers": (1, 10_000),
    "gpus_per_worker": (0, 64),
    "max_restarts": (0, 10_000),
    "timeout": (1, 366 * 24 * 3600),  # one second to a year
    "global_batch": (1, 1_000_000_000),
}
#: The options of :data:`NUMBER_LIMITS` that are whole numbers (the others: seconds).
_INTEGER_OPTIONS = frozenset({"workers", "gpus_per_worker", "max_restarts", "global_batch"})


def number_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is not a valid value of the numeric job option ``name`` (one line
    naming the option and its range), or None when it is valid.

    A whole-number option takes an ``int`` (not a bool); ``timeout`` an int or a float.
    NaN, infinity and numbers outside :data:`NUMBER_LIMITS` are refused.
    """
    low, high = NUMBER_LIMITS[name]
    integer = name in _INTEGER_OPTIONS
    # repr refuses an int of over 4300 digits: a huge one is shown by its size
    huge = isinstance(value, int) and value.bit_length() > 64
    shown = f"an integer of {value.bit_length()} bits" if huge else repr(value)
    unit = "" if integer else " s"
    kind = "an integer" if integer else "a number of seconds"
    number = isinstance(value, int) or (not integer and isinstance(value, float))
    if isinstance(value, bool) or not number:
        return f"{name} must be {kind} from {low} to {high}, got {shown}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{name} must be a finite number of seconds from {low} to {high}, got {shown}"
    if value < low:
        if name == "workers":
            return f"workers must be a positive integer, got {shown}"
        return f"{name} must be at least {low}{unit}, got {shown}"
    if value > high:
        return f"{name} must be at most {high}{unit}, got {shown}"
    return None


@dataclass(frozen=True)
class RankEntry:
    """What one rank of a kind of job runs, by module name (the launchers and the warm
    pool import none of it).

    Attributes:
        module: started as ``python -m MODULE JOB_DIR [RANK]``.
        main: the module whose ``main(argv)`` that runs (the zygote calls it in a forked
            child, with the same arguments).
        takes_rank: whether ``RANK`` is an argument (else the rank reads ``$RANK``).
    """

    module: str
    main: str
    takes_rank: bool = False

    def argv(self, job_root: str, rank: str) -> list[str]:
        """``[JOB_DIR(, RANK)]``: the arguments after the module's name."""
        return [job_root, rank] if self.takes_rank else [job_root]


_BATCH_RANK = RankEntry("alchemist.runtime", "alchemist.runtime.worker")
#: A job's ``entry`` → what each of its ranks runs.
RANK_ENTRIES: dict[str, RankEntry] = {
    "cell": _BATCH_RANK,
    "script": _BATCH_RANK,
    "function": _BATCH_RANK,
    "session": RankEntry("alchemist.interactive.engine", "alchemist.interactive.engine", True),
}
#: The entry of an interactive session's spec: its ranks run cells, one at a time.
SESSION_ENTRY = "session"


class JobState(str, enum.Enum):
    """Life cycle of a job.

    ``PENDING → [QUEUED →] RUNNING ⇄ RESTARTING → SUCCEEDED | FAILED | CANCELLED``. A
    job waits as QUEUED while its backend has no room for it (the reason says for what);
    it may go from PENDING or QUEUED straight to a terminal state (for example cancelled
    before it ran). Terminal states never change again.
    """

    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    RESTARTING = "restarting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@dataclass
class Resources:
    """What one worker gets. ``cpu`` and ``memory`` use Kubernetes quantities."""

    gpus: int = 0
    cpu: str | None = None
    memory: str | None = None

    @property
    def procs(self) -> int:
        """Processes a worker runs: one per GPU, or one on CPU."""
        return max(1, self.gpus)


@dataclass
class JobSpec:
    """Everything needed to run one job, independent of the backend.

    Attributes:
        name: human-readable name (letters, digits, ``.-_``; at most 63 characters).
        workers: number of workers (a process on the local backend, a pod on Kubernetes).
        resources: per-worker resources; ``gpus`` processes per worker when > 0.
        algorithm: distributed algorithm (one of :data:`ALGORITHMS`).
        algorithm_options: per-job parameters of the algorithm (e.g. ``block_momentum``).
        backend: backend name (``local``, ``kubernetes``).
        env: extra environment variables for every worker.
        max_restarts: how often the whole worker group is restarted after a failure.
        timeout: seconds after which the job is stopped and marked failed; None = no limit.
        outputs: names copied from rank 0 back to the caller after success.
        global_batch: if set, the per-worker batch is ``global_batch / world_size`` (a
            multiple of the world size, so the job trains exactly this batch).
        image: container image (Kubernetes); None = the backend's default.
        include: for workers that cannot see the notebook's folder (Kubernetes), only its
            files matching these ``.gitignore``-style patterns travel (all when empty).
        exclude: files of the notebook's folder that never travel to such workers.
        debug: run the ranks with ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (ranks that call
            different collectives fail at once, naming both; see docs/diagnosis.md).
        no_warm: start the ranks cold (fresh interpreters under torchrun) even where the
            user's warm pool could fork them (local backend; docs/architecture.md).

    What a user may set, and from where, is the table in :mod:`alchemist.job.options`.
        entry: what the workers run: ``cell`` (a bundled notebook cell), ``script``
            (a Python file's source), ``function`` (a pickled callable) or ``session``
            (an interactive session's engines: :mod:`alchemist.interactive`).
    """

    name: str = "job"
    workers: int = 2
    resources: Resources = field(default_factory=Resources)
    algorithm: str = "sync"
    algorithm_options: dict[str, Any] = field(default_factory=dict)
    backend: str = "local"
    env: dict[str, str] = field(default_factory=dict)
    max_restarts: int = 0
    timeout: float | None = None
    outputs: list[str] = field(default_factory=list)
    global_batch: int | None = None
    image: str | None = None
    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    debug: bool = False
    no_warm: bool = False
    entry: str = "cell"

    @property
    def procs_per_worker(self) -> int:
        return self.resources.procs

    @property
    def world_size(self) -> int:
        return self.workers * self.procs_per_worker

    def validate(self) -> JobSpec:
        """Check the spec and return it; raise :class:`SpecError` naming the field."""
        if not _NAME_RE.match(self.name):
            raise SpecError(
                f"name {self.name!r} is not valid: use 1-63 letters, digits, '.', '-' or '_',"
                " starting with a letter or digit"
            )
        for option, value in (
            ("workers", self.workers),
            ("gpus_per_worker", self.resources.gpus),
            ("max_restarts", self.max_restarts),
            ("timeout", self.timeout),
            ("global_batch", self.global_batch),
        ):
            if value is None and option in ("timeout", "global_batch"):
                continue  # not set: no limit, no global batch
            problem = number_problem(option, value)
            if problem is not None:
                raise SpecError(problem)
        if not isinstance(self.algorithm_options, dict):
            raise SpecError(
                f"algorithm_options must be a mapping of names to values,"
                f" got {self.algorithm_options!r}"
            )
        from alchemist.job.algorithms import check

        # An unknown algorithm or option; the ranks apply the same check.
        check(self.algorithm, self.algorithm_options)
        for key, env_value in self.env.items():
            if not isinstance(key, str) or not _ENV_KEY_RE.match(key):
                raise SpecError(f"environment variable name {key!r} is not valid")
            if not isinstance(env_value, str) or "\0" in env_value:
                raise SpecError(
                    f"environment variable {key} must be text without NUL characters"
                    " (no process environment can hold one)"
                )
            if key in RUNTIME_ENV or key.startswith(RUNTIME_ENV_PREFIXES):
                raise SpecError(
                    f"environment variable {key} is set by Alchemist for every rank and"
                    " cannot be overridden with env; read it in the code instead"
                )
        for out in self.outputs:
            if not isinstance(out, str) or not out.isidentifier() or keyword.iskeyword(out):
                raise SpecError(
                    f"output {out!r} is not a Python variable name (an identifier that is"
                    " not a keyword such as None or class)"
                )
        if self.global_batch is not None and self.global_batch < self.world_size:
            raise SpecError(
                f"global_batch {self.global_batch} is smaller than the world size"
                f" {self.world_size}: every worker needs at least one sample"
            )
        if self.global_batch is not None and self.global_batch % self.world_size:
            lower = self.global_batch - self.global_batch % self.world_size
            raise SpecError(
                f"global_batch {self.global_batch} is not a multiple of the world size"
                f" {self.world_size} (every worker takes the same share):"
                f" use {lower} or {lower + self.world_size}"
            )
        compile_patterns(self.include, "--include")
        compile_patterns(self.exclude, "--exclude")
        if not isinstance(self.debug, bool):
            raise SpecError(f"debug must be true or false, got {self.debug!r}")
        if not isinstance(self.no_warm, bool):
            raise SpecError(f"no_warm must be true or false, got {self.no_warm!r}")
        if self.entry not in RANK_ENTRIES:
            raise SpecError(f"entry must be cell, script, function or session, got {self.entry!r}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        """Build a spec from JSON data; unknown keys are an error naming the key."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"unknown field(s) in job spec: {', '.join(unknown)}")
        values = dict(data)
        res = values.pop("resources", None) or {}
        if not isinstance(res, dict):
            raise SpecError("resources must be an object")
        res_known = {f.name for f in dataclasses.fields(Resources)}
        bad = sorted(set(res) - res_known)
        if bad:
            raise SpecError(f"unknown field(s) in resources: {', '.join(bad)}")
        try:
            return cls(resources=Resources(**res), **values)
        except TypeError as e:  # pragma: no cover - guarded by the key checks above
            raise SpecError(str(e)) from e


def spec_dict(stored: dict[str, Any], spec: JobSpec) -> dict[str, Any]:
    """``spec.to_dict()``, where ``stored`` is the dict ``spec`` was read from: that dict
    itself when it has every field (as ``to_dict`` wrote it), which spares a listing
    the deep copy of every job's spec; else ``spec.to_dict()`` (a spec an earlier
    version wrote, without the fields added since)."""
    fields, resources = _field_names()
    inner = stored.get("resources")
    if stored.keys() == fields and isinstance(inner, dict) and inner.keys() == resources:
        return stored
    return spec.to_dict()


@functools.cache
def _field_names() -> tuple[frozenset[str], frozenset[str]]:
    return (
        frozenset(f.name for f in dataclasses.fields(JobSpec)),
        frozenset(f.name for f in dataclasses.fields(Resources)),
    )


@dataclass
class JobStatus:
    """What a backend knows about a job right now.

    Attributes:
        state: the job's state.
        reason: why a job failed, was cancelled or is pending (one line), or None.
        exit_code: the launcher's exit code once terminal, if known.
        restarts: how many times the worker group was restarted.
        started: UNIX time the workers started, if they did.
        finished: UNIX time the job reached a terminal state, if it did.
        ranks: per-rank detail where the backend has it (e.g. pod phases).
    """

    state: JobState
    reason: str | None = None
    exit_code: int | None = None
    restarts: int = 0
    started: float | None = None
    finished: float | None = None
    ranks: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["state"] = self.state.value
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobStatus:
        values = dict(data)
        values["state"] = JobState(values["state"])
        return cls(**values)
