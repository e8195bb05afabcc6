"""The Backend contract: where and how a job's workers run.

Modelled on torchx's scheduler API: :meth:`Backend.submit` is :meth:`Backend.dryrun`
followed by :meth:`Backend._schedule` of exactly what the dry run returned, so what a
user sees with ``--dry-run`` is what runs. Subclasses fill the private hooks.

Every backend shares the job directory layout of :mod:`alchemist.job.jobdir`: the bundle
is written there before submission, workers write logs, metrics and checkpoints
there, and the reader tails them. On Kubernetes the directory is on a shared volume.
"""

from __future__ import annotations

import abc
import json
from dataclasses import dataclass, field
from typing import Any

from alchemist.errors import SpecError
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import ALGORITHMS, SESSION_ENTRY, JobSpec, JobStatus


@dataclass(frozen=True)
class JobRequest:
    """A job ready to be run: its id, owner, spec and (already populated) job directory."""

    job_id: str
    owner: str
    spec: JobSpec
    job_dir: JobDir


@dataclass
class DryRunInfo:
    """The exact request a backend would make.

    Attributes:
        backend: backend name.
        request: backend-specific, JSON-serialisable: ``{"argv", "env", "cwd"}`` for
            local processes, ``{"manifests": [...]}`` for Kubernetes.
        text: the same, formatted for people (shell command or YAML).
        warnings: one line each: what of the spec this backend ignores (shown with the
            dry run and when the job is submitted).
    """

    backend: str
    request: dict[str, Any]
    text: str
    extra: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "request": self.request,
            "text": self.text,
            "warnings": list(self.warnings),
            **self.extra,
        }

    def __str__(self) -> str:
        return self.text


@dataclass
class LogChunk:
    """Lines of one rank's log from a byte cursor.

    ``cursor`` is where the next read starts; lines are complete (a partial last line is
    left for the next read).
    """

    rank: int
    lines: list[str]
    cursor: int
    truncated: bool = False


class Backend(abc.ABC):
    """Runs jobs. Implementations must honour these guarantees.

    - ``submit`` runs exactly the request of the dry run it is given (the one the user
      saw), without computing another, and returns once the job is recorded by the
      backend (its workers may still be pending).
    - ``dryrun`` refuses, in one line, an algorithm not in :attr:`algorithms`.
    - ``status`` of a job the backend has never seen raises ``JobNotFoundError``;
      otherwise it returns the current :class:`JobStatus`. Terminal states are final.
    - ``cancel`` stops every worker of the job and is idempotent: cancelling a finished
      or already cancelled job is a no-op that does not change its state.
    - ``logs`` never raises for a rank that has not written yet; it returns no lines.
    """

    #: registry name, e.g. "local"
    name: str = ""
    #: the algorithms this backend runs; :meth:`dryrun` refuses the others in one line
    algorithms: frozenset[str] = frozenset(ALGORITHMS)
    #: the workers cannot see the notebook's folder (pods on their own storage): its
    #: files travel in the bundle and the workers start in that copy
    #: (:mod:`alchemist.bundle.datafiles`); False: they run in the folder itself
    ships_files: bool = False
    #: it runs interactive sessions (``spec.entry == "session"``: ipyparallel engines
    #: as its ranks, :mod:`alchemist.interactive`); :meth:`dryrun` refuses them elsewhere
    runs_sessions: bool = False

    def dryrun(self, req: JobRequest) -> DryRunInfo:
        """Return the exact request that :meth:`submit` would make. Submits nothing.

        Raises:
            SpecError: the spec is invalid, or this backend does not run its algorithm.
        """
        req.spec.validate()
        if req.spec.entry == SESSION_ENTRY and not self.runs_sessions:
            raise SpecError(
                f"backend {self.name!r} does not run interactive sessions: use the local or"
                " the kubernetes backend"
            )
        if req.spec.algorithm not in self.algorithms:
            raise SpecError(
                f"backend {self.name!r} does not run algorithm {req.spec.algorithm!r}; it runs"
                f" {', '.join(sorted(self.algorithms))}: pick one of those, or another --backend"
            )
        return self._dryrun(req)

    def submit(self, req: JobRequest, info: DryRunInfo | None = None) -> DryRunInfo:
        """Run the job: schedule exactly ``info``, the dry run the caller showed and
        checked (made here when not given), once; return it."""
        if info is None:
            info = self.dryrun(req)
        self._schedule(req, info)
        return info

    def concurrent_limit(self, spec: JobSpec) -> int | None:
        """How many jobs of ``spec`` this backend can ever run at once (a sweep's
        ``--parallel`` above it would only queue); None: no fixed bound (a cluster's
        queue, Kueue, decides)."""
        return None

    @abc.abstractmethod
    def _dryrun(self, req: JobRequest) -> DryRunInfo: ...

    @abc.abstractmethod
    def _schedule(self, req: JobRequest, info: DryRunInfo) -> None: ...

    @abc.abstractmethod
    def status(self, req: JobRequest) -> JobStatus:
        """The job's current status, reconciled with what is really running."""

    @abc.abstractmethod
    def cancel(self, req: JobRequest) -> None:
        """Stop every worker. Idempotent."""

    def logs(
        self, req: JobRequest, rank: int, since: int = 0, limit_bytes: int = 1 << 20
    ) -> LogChunk:
        """Read rank ``rank``'s log from byte offset ``since`` (at most ``limit_bytes``).

        The default reads the rank log in the job directory, which every backend shares.
        """
        from alchemist.metrics.tail import read_lines

        lines, cursor, truncated = read_lines(req.job_dir.rank_log(rank), since, limit_bytes)
        return LogChunk(rank=rank, lines=lines, cursor=cursor, truncated=truncated)


def format_command(argv: list[str], env: dict[str, str]) -> str:
    """A shell-like rendering of a command with its extra environment."""
    import shlex

    env_part = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    cmd = " ".join(shlex.quote(a) for a in argv)
    return f"{env_part} \\\n  {cmd}" if env_part else cmd


def dump_request(request: dict[str, Any]) -> str:
    return json.dumps(request, indent=2, sort_keys=True)
