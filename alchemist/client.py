"""The Python API: submit, list, attach to and control jobs.

This is the one submission path: the magics, the CLI and the REST API all call
:func:`submit`, which builds the spec and the bundle, asks the backend for a dry run,
and (unless ``dry_run``) records the job and runs exactly that.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alchemist import jobindex
from alchemist.backends import get_backend
from alchemist.backends.api import Backend, DryRunInfo, JobRequest, LogChunk
from alchemist.bundle import Bundle, build_bundle, source_of, write_bundle
from alchemist.errors import (
    AlchemistError,
    BackendError,
    CursorError,
    JobNotFoundError,
    PermissionDeniedError,
    SpecError,
)
from alchemist.job import config
from alchemist.job.jobdir import JobDir, atomic_write_bytes, atomic_write_json, make_private_dir
from alchemist.job.options import options_for, spec_from_options
from alchemist.job.spec import JobSpec, JobState, JobStatus, spec_dict
from alchemist.store import JobRecord, get_store


def new_job_id() -> str:
    """A short id, unique enough, valid as part of a DNS name (Kubernetes objects)."""
    return "j" + secrets.token_hex(5)


@dataclass
class DryRun:
    """What :func:`submit` would run. Printing it shows the command and the bundle
    (a session's has none)."""

    spec: JobSpec
    info: DryRunInfo
    bundle: Bundle | None
    job_id: str

    @property
    def text(self) -> str:
        return (
            f"# dry run: job {self.job_id} ({self.spec.name}) on backend {self.info.backend},"
            f" world size {self.spec.world_size}; nothing was submitted\n"
            f"{self.info.text}" + (f"\n\n{self.bundle.describe()}" if self.bundle else "")
        )

    def __str__(self) -> str:
        return self.text

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "spec": self.spec.to_dict(),
            "dryrun": self.info.to_dict(),
            "bundle": self.bundle.describe() if self.bundle else None,
            "text": self.text,
        }


class Job:
    """A handle on a submitted job. Cheap to create; every call asks the backend."""

    def __init__(self, record: JobRecord) -> None:
        self._record = record
        #: what the backend said it ignores of the spec, when this handle submitted it
        self.warnings: list[str] = []
        self._spec: JobSpec | None = None

    # -- identity ------------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self._record.id

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def owner(self) -> str:
        return self._record.owner

    @property
    def backend_name(self) -> str:
        return self._record.backend

    @property
    def created(self) -> float:
        return self._record.created

    @property
    def spec(self) -> JobSpec:
        if self._spec is None:  # a job's spec never changes: parsed once per handle
            self._spec = JobSpec.from_dict(self._record.spec)
        return self._spec

    @property
    def job_dir(self) -> JobDir:
        return JobDir(Path(self._record.job_dir))

    @property
    def backend(self) -> Backend:
        return get_backend(self._record.backend)

    def _request(self) -> JobRequest:
        return JobRequest(self.id, self.owner, self.spec, self.job_dir)

    def __repr__(self) -> str:
        return f"<alchemist.Job {self.id} {self.name!r} {self._record.state}>"

    # -- state ---------------------------------------------------------------------------
    def status(self) -> JobStatus:
        """The job's status, reconciled with the backend and saved in the store."""
        rec = self._record
        if JobState(rec.state).is_terminal:
            return JobStatus(
                state=JobState(rec.state),
                reason=rec.reason,
                restarts=rec.restarts,
                started=rec.started,
                finished=rec.finished,
            )
        st = self.backend.status(self._request())
        changed = {
            "state": st.state.value,
            "reason": st.reason,
            "started": st.started,
            "finished": st.finished,
            "restarts": st.restarts,
        }
        if any(getattr(rec, k) != v for k, v in changed.items()):
            get_store().update(self.id, **changed)
            for k, v in changed.items():
                setattr(rec, k, v)
        return st

    def wait(self, timeout: float | None = None, poll: float = 0.2) -> JobStatus:
        """Block until the job is terminal (or ``timeout`` seconds pass); return its
        status, with what each rank's code did (``ranks``: per rank its state, exit
        status and attempt, from the ranks' own records) once it ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = self.status()
            if st.state.is_terminal and not st.ranks:
                from alchemist.job.outcomes import ranks_detail

                st = dataclasses.replace(st, ranks=ranks_detail(self.job_dir))
            if st.state.is_terminal or (deadline is not None and time.monotonic() >= deadline):
                return st
            time.sleep(poll)

    def cancel(self, reason: str | None = None) -> None:
        """Stop every worker; idempotent (a finished job is left as it is). ``reason``
        (one line) becomes the cancelled job's reason instead of "cancelled by the user"."""
        if reason is not None and not self.status().state.is_terminal:
            self.job_dir.request_cancel(reason)
        self.backend.cancel(self._request())
        self.status()

    # -- data ----------------------------------------------------------------------------
    def ranks(self) -> list[int]:
        found = set(self.job_dir.ranks_with_logs())
        return sorted(found or set(range(self.spec.world_size)))

    def log_chunk(self, rank: int, since: int = 0, limit_bytes: int = 1 << 20) -> LogChunk:
        """Complete lines of ``rank``'s log from byte cursor ``since``."""
        return self.backend.logs(self._request(), rank, since, limit_bytes)

    def log_tail(self, rank: int, lines: int = 100, max_bytes: int = 1 << 20) -> LogChunk:
        """The last ``lines`` complete lines of ``rank``'s log (within its last
        ``max_bytes``), read from the end: the cost does not grow with the log. The
        chunk's ``cursor`` is where :meth:`log_chunk` follows on from; ``truncated``
        says whether earlier lines exist.

        Raises:
            ValueError: ``lines`` or ``max_bytes`` is negative.
        """
        from alchemist.metrics.tail import read_tail

        got, cursor, earlier = read_tail(self.job_dir.rank_log(rank), lines, max_bytes)
        return LogChunk(rank=rank, lines=got, cursor=cursor, truncated=earlier)

    def logs(self, rank: int | None = None) -> str:
        """A rank's whole log, or every rank's with a ``[rank r]`` prefix."""
        out: list[str] = []
        for r in [rank] if rank is not None else self.ranks():
            cursor = 0
            while True:
                chunk = self.log_chunk(r, cursor)
                prefix = "" if rank is not None else f"[rank {r}] "
                out.extend(prefix + line for line in chunk.lines)
                if chunk.cursor == cursor or not chunk.truncated:
                    break
                cursor = chunk.cursor
        return "\n".join(out) + ("\n" if out else "")

    def metrics(
        self, since: str | int | None = None, *, system: bool = False
    ) -> list[dict[str, Any]]:
        """Every metric event (``{job_id, rank, step, time, values}``) of every rank after
        cursor ``since`` (None: all), rank after rank, each rank's in the order logged;
        with ``system``, the system metrics each rank's sampler recorded (CPU, memory,
        GPU) instead of what the code logged.

        Raises:
            CursorError: ``since`` is not a cursor a read returned.
        """
        return self.metrics_chunk(since, system=system)[0]

    def metrics_chunk(
        self, since: str | int | None = None, max_bytes: int | None = None, *, system: bool = False
    ) -> tuple[list[dict[str, Any]], str]:
        """Metric events after cursor ``since`` (about ``max_bytes`` at most) and the
        cursor to read from next, for callers that page through a long history.

        The cursor is an opaque string (see :mod:`alchemist.metrics.reader`): keep it,
        even across a kernel restart, and pass it back to read only what is new.

        Raises:
            CursorError: ``since`` is not a cursor a read returned.
        """
        from alchemist.metrics.reader import MetricsReader

        events, cursor = MetricsReader(self.job_dir, system=system).read(since, max_bytes)
        return list(events), cursor

    def metrics_frame(self) -> Any:
        """The metric events as a pandas DataFrame (needs pandas)."""
        from alchemist.metrics.reader import events_to_dataframe

        return events_to_dataframe(self.metrics())

    def outputs(self) -> dict[str, Any]:
        """The values named with ``--outputs``, as rank 0 left them (after success)."""
        import cloudpickle

        path = self.job_dir.outputs
        if not path.exists():
            raise AlchemistError(
                f"job {self.id} has no outputs: it has not succeeded, or named none with -o"
            )
        return dict(cloudpickle.loads(path.read_bytes()))

    def to_dict(self) -> dict[str, Any]:
        st = self.status()
        spec = self.spec
        return {
            "id": self.id,
            "name": self.name,
            "owner": self.owner,
            "backend": self.backend_name,
            "state": st.state.value,
            "reason": st.reason,
            "restarts": st.restarts,
            "created": self.created,
            "started": st.started,
            "finished": st.finished,
            "workers": spec.workers,
            "gpus_per_worker": spec.resources.gpus,
            "world_size": spec.world_size,
            "algorithm": spec.algorithm,
            "kind": "session" if spec.entry == "session" else "batch",  # alchemist.interactive
            "spec": spec_dict(self._record.spec, spec),
            "job_dir": str(self.job_dir.root),
            "stalled": self.stalled(st),
        }

    # -- hang diagnosis (alchemist.diagnosis) ---------------------------------------------
    def stalled(self, status: JobStatus | None = None) -> str | None:
        """While the job runs: one line naming the laggard when no rank advanced for the
        stall threshold (``"no rank advanced for 41 s (threshold 30 s): rank 1 at step
        1199 (41 s ago); rank 0 at 1200"``), else None. A note, never a state."""
        st = status or self.status()
        if st.state != JobState.RUNNING:
            return None
        from alchemist.diagnosis.progress import stall_of

        try:
            stall = stall_of(self.job_dir, self.spec.world_size)
        except OSError:
            return None
        return stall.note if stall is not None and stall.stalled else None

    def diagnose(
        self,
        timeout: float | None = None,
        on_partial: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Which rank, and where: the diagnosis report (:mod:`alchemist.diagnosis.report`),
        a JSON-serialisable dict with a one-sentence ``headline``. It reads the ranks'
        progress, asks each rank for its stacks (waiting ``timeout`` seconds at most;
        default 3), calls ``on_partial`` with a partial report as they answer, and never
        changes the job's state."""
        from alchemist.diagnosis import report

        return report.diagnose_job(self, timeout=timeout, on_partial=on_partial)


def _default_namespace() -> dict[str, Any]:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return {}
    shell = get_ipython()
    return dict(shell.user_ns) if shell is not None else {}


def make_spec(*, entry: str = "cell", **options: Any) -> JobSpec:
    """A validated :class:`JobSpec` from job options as keyword arguments.

    The keywords are the options of :data:`alchemist.job.options.JOB_OPTIONS` ({option_names});
    one left out (or None) takes the table's default. An unset ``backend`` is
    ``$ALCHEMIST_BACKEND``, else ``local``.

    Args:
        entry: what the workers run (``cell``, ``script`` or ``function``).
        **options: the job options.

    Raises:
        SpecError: an unknown keyword (naming the valid ones) or an invalid value.
    """
    return spec_from_options(options, entry=entry, fallback=_option_fallback)


def default_backend() -> str:
    """The backend of a job or session that names none: ``$ALCHEMIST_BACKEND``, else local."""
    return os.environ.get("ALCHEMIST_BACKEND") or "local"


def _option_fallback(name: str) -> Any:
    """The value of an option left unset that is not the spec's own default."""
    if name == "backend":
        return default_backend()
    return None


def submit(
    code: str | Path | Callable[[], Any],
    *,
    namespace: dict[str, Any] | None = None,
    dry_run: bool = False,
    args: list[str] | None = None,
    **options: Any,
) -> Any:
    """Run ``code`` as a distributed job.

    Args:
        code: a cell's (or script's) source, a ``Path`` to a ``.py`` script or ``.ipynb``
            notebook (its code cells run in order), or a no-argument callable (its
            return value becomes the output ``result``).
        namespace: where a cell's free names are looked up; default: the IPython user
            namespace when called from a notebook.
        dry_run: return a :class:`DryRun` describing exactly what would run; submit nothing.
        args: a ``.py`` script's command-line arguments: its ``sys.argv`` is the script's
            name and these, as under torchrun (``alchemist submit train.py -- ARGS``).
        **options: the job options, as for :func:`make_spec` (the table in
            :mod:`alchemist.job.options`: {option_names}).

    Returns:
        A :class:`Job`, or a :class:`DryRun` when ``dry_run``.

    Raises:
        SpecError: an option is invalid (the message names it).
        BundleError: the code cannot be shipped (syntax error, unpicklable or big value).
        BackendError: the backend refused the job.
    """
    source, ns, cwd, function = "", None, None, None
    if callable(code) and not isinstance(code, (str, Path)):
        options.setdefault("outputs", ["result"])
        options.setdefault("name", getattr(code, "__name__", "job").strip("<>") or "job")
        entry, function = "function", code
    elif isinstance(code, Path):
        source, entry = source_of(code)
        if args and code.suffix != ".py":
            raise SpecError(f"arguments after -- are for a .py script, not {code.name}")
        options.setdefault("name", _safe_name(code.stem))
        ns, cwd = {}, str(code.resolve().parent)
    else:
        entry, source = "cell", str(code)
        ns = namespace if namespace is not None else _default_namespace()
    spec = make_spec(entry=entry, **options)
    bundle = _build(spec, source, ns, entry, function=function, cwd=cwd)

    def write(job_dir: JobDir) -> None:
        write_bundle(bundle, job_dir.bundle)
        if isinstance(code, Path) and code.suffix == ".py":
            from alchemist.bundle.store import write_argv

            write_argv(job_dir.bundle, code.name, list(args or []))

    return _submit(spec, new_job_id(), write, dry_run=dry_run, bundle=bundle)


def _build(
    spec: JobSpec,
    source: str,
    ns: dict[str, Any] | None,
    entry: str,
    *,
    function: Callable[[], Any] | None = None,
    cwd: str | None = None,
) -> Bundle:
    """The bundle of a job of ``spec``: what its workers run, with the values they need."""
    from alchemist.job.config import max_value_bytes

    return build_bundle(
        source,
        ns,
        entry=entry,
        function=function,
        max_value_bytes=max_value_bytes(),
        cwd=cwd,
        ship_data=get_backend(spec.backend).ships_files,  # pods do not see the notebook's folder
        include=spec.include,
        exclude=spec.exclude,
    )


def save_template(
    cell: str, directory: Path, *, namespace: dict[str, Any] | None = None, **options: Any
) -> JobSpec:
    """Bundle a cell once, for many jobs later (a sweep's trials): its values from
    ``namespace`` (default: the notebook's) are taken now and stored in ``directory``;
    :func:`submit_template` runs the cell from there, with its source changed, even after
    the kernel is gone. Returns the trials' validated spec.

    Raises:
        SpecError, BundleError: as :func:`submit`.
    """
    spec = make_spec(entry="cell", **options)
    ns = namespace if namespace is not None else _default_namespace()
    bundle = _build(spec, cell, ns, "cell")
    make_private_dir(directory)
    write_bundle(bundle, directory)
    return spec


def submit_template(
    directory: Path,
    source: str,
    *,
    job_id: str | None = None,
    dry_run: bool = False,
    **options: Any,
) -> Any:
    """Run a bundle that :func:`save_template` stored, with ``source`` as its code (the
    same cell with other values; its names must be those the bundle carries).

    Returns:
        A :class:`Job`, or a :class:`DryRun` when ``dry_run``.
    """
    spec = make_spec(entry="cell", **options)

    def write(job_dir: JobDir) -> None:
        shutil.copytree(directory, job_dir.bundle, dirs_exist_ok=True)
        atomic_write_bytes(job_dir.bundle / "source.py", source.encode())

    return _submit(spec, job_id or new_job_id(), write, dry_run=dry_run)


def submit_session(spec: JobSpec, session_config: dict[str, Any], *, dry_run: bool = False) -> Any:
    """Submit an interactive session (``spec.entry == "session"``) as every job is: its
    job directory with ``session/config.json`` (:class:`~alchemist.job.session.SessionDir`),
    its row in the index, then :meth:`Backend.submit`. The notebook's side of it is
    :class:`alchemist.interactive.Session`.

    Returns:
        A :class:`Job` (its id starts with ``s``), or a :class:`DryRun` when ``dry_run``.

    Raises:
        BackendError: the backend refused it (capacity, quota, a missing image).
    """
    from alchemist.job.session import SessionDir

    def write(job_dir: JobDir) -> None:
        sd = SessionDir(job_dir)
        make_private_dir(sd.root)
        atomic_write_json(sd.config, session_config)
        # Starting counts as busy: the idle clock runs from when the session is ready.
        atomic_write_json(sd.activity, {"busy": True, "time": time.time()})

    return _submit(spec, "s" + new_job_id()[1:], write, dry_run=dry_run)


def _submit(
    spec: JobSpec,
    job_id: str,
    write: Callable[[JobDir], None],
    *,
    dry_run: bool,
    bundle: Any = None,
) -> Any:
    """The one submission path: the backend's dry run, then (unless ``dry_run``) the job
    directory with the spec and what ``write`` adds, its row, and :meth:`Backend.submit`
    of exactly what was validated."""
    backend = get_backend(spec.backend)
    job_dir = JobDir(config.jobs_root() / job_id)
    owner = config.current_user()
    req = JobRequest(job_id, owner, spec, job_dir)
    info = backend.dryrun(req)
    if dry_run:
        return DryRun(spec=spec, info=info, bundle=bundle, job_id=job_id)

    # A user's job files are theirs alone: the folders are made 0700 (never open to
    # others, whatever the umask), the files below 0600. The files come before the row,
    # marked while they are written, so that a submit dying in between leaves a folder
    # the next listing indexes (alchemist.jobindex).
    store = get_store()
    with jobindex.indexing(job_id):
        job_dir.create()
        atomic_write_json(job_dir.spec, spec.to_dict())
        try:
            write(job_dir)
        except BaseException:
            shutil.rmtree(job_dir.root, ignore_errors=True)  # not a job: nothing submitted
            raise
        record = pending_record(job_id, owner, spec, job_dir)
        # Beside the spec, so that a directory whose row was lost is indexed again.
        atomic_write_json(job_dir.record, _record_file(record))
        store.add_new(record)

    def refused(reason: str) -> None:
        # In the job directory too (the truth): an index rebuilt from it keeps the reason.
        finished = time.time()
        job_dir.write_state(state=JobState.FAILED.value, reason=reason, finished=finished)
        store.update(job_id, state=JobState.FAILED.value, reason=reason, finished=finished)

    try:
        backend.submit(req, info)  # exactly what was validated above, not a new dry run
    except AlchemistError as e:
        refused(str(e))
        raise
    except Exception as e:
        refused(str(e))
        raise BackendError(f"backend {spec.backend!r} could not start the job: {e}") from e
    job = Job(record)
    job.warnings = list(info.warnings)
    return job


def pending_record(job_id: str, owner: str, spec: JobSpec, job_dir: JobDir) -> JobRecord:
    """The job index row of a job just written to ``job_dir`` (batch job or session)."""
    return JobRecord(
        id=job_id,
        owner=owner,
        name=spec.name,
        backend=spec.backend,
        state=JobState.PENDING.value,
        reason=None,
        created=time.time(),
        started=None,
        finished=None,
        restarts=0,
        spec=spec.to_dict(),
        job_dir=str(job_dir.root),
    )


def _safe_name(stem: str) -> str:
    import re

    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._") or "job"
    return name[:63]


@dataclass
class Listing:
    """The current user's jobs, and those that could not be read.

    Attributes:
        jobs: newest first.
        skipped: ``(job id, why)`` of each job whose record or directory is unreadable
            (a damaged ``spec.json``, a backend no longer installed): listed apart, so
            one broken job never hides the others.
    """

    jobs: list[Job]
    skipped: list[tuple[str, str]]
    #: the cursor of the next page (``before=``), or None when this page is the last
    next: str | None = None


def _record_file(record: JobRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "owner": record.owner,
        "name": record.name,
        "backend": record.backend,
        "created": record.created,
    }


def list_jobs(
    state: str | None = None, limit: int | None = None, before: str | None = None
) -> Listing:
    """The current user's jobs, newest first, with states reconciled, a page at a time.

    ``state`` filters on the reconciled state before ``limit`` counts, so
    ``limit=5, state="running"`` is the five newest running jobs, however many
    finished jobs are newer. ``before`` is the :attr:`Listing.next` of the previous
    page: the page after it. A job folder of the user's that has no row in the index
    (a submit that died between the two) is indexed again first, so no job is ever
    missing from the list.

    A page costs the same however long the history: rows are read from the index a
    page at a time, and a terminal state (stored once reached, never changed) needs no
    reconciling. With ``state``, only rows that can be in it are read: those stored in
    it and the few not yet terminal.

    Raises:
        CursorError: ``before`` is not a :attr:`Listing.next`.
    """
    out: list[Job] = []
    skipped: list[tuple[str, str]] = []
    owner = config.current_user()
    key = parse_page_cursor(before)
    jobindex.reindex(owner)
    store = get_store()
    candidates: list[str] | None = None
    if state:
        active = [s.value for s in JobState if not s.is_terminal]
        candidates = active if state in active else [state, *active]
    # One row past the page says whether another page follows; a state filter reads
    # more at a time (some candidates are no longer in that state).
    batch = (max(50, 2 * limit) if state else limit) + 1 if limit else None
    last: JobRecord | None = None
    while True:
        records = store.list(owner, limit=batch, states=candidates, before=key)
        for record in records:
            if limit and len(out) >= limit:
                return Listing(out, skipped, _page_cursor(last))
            last = record
            job = Job(record)
            try:
                job.spec  # noqa: B018 - a job whose spec cannot be read is skipped here
                current = job.status().state.value
            except Exception as e:  # one unreadable job must not fail the whole list
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
                skipped.append((record.id, why))
                continue
            if state and current != state:
                continue
            out.append(job)
        if batch is None or len(records) < batch:
            return Listing(out, skipped, None)
        key = (records[-1].created, records[-1].id)


def _page_cursor(record: JobRecord | None) -> str | None:
    """The opaque cursor of the page after ``record`` (its creation time and id)."""
    return None if record is None else f"{record.created!r}~{record.id}"


def parse_page_cursor(cursor: str | None) -> tuple[float, str] | None:
    """The ``(created, id)`` key of a page cursor; None for none.

    Raises:
        CursorError: ``cursor`` is not one that :func:`list_jobs` returned.
    """
    if not cursor:
        return None
    created, sep, job_id = cursor.partition("~")
    try:
        if not sep or not job_id:
            raise ValueError(cursor)
        return float(created), job_id
    except ValueError:
        raise CursorError(
            f"{cursor!r} is not a page cursor: pass back the 'next' of the previous page"
        ) from None


def jobs(state: str | None = None, limit: int | None = None) -> list[Job]:
    """The current user's jobs, newest first (see :func:`list_jobs`)."""
    return list_jobs(state, limit).jobs


def attach(job_id: str) -> Job:
    """A handle on one of the current user's jobs.

    Raises:
        JobNotFoundError: no such job.
        PermissionDeniedError: the job belongs to another user.
    """
    record = get_store().get(job_id)
    if record is None:
        raise JobNotFoundError(f"no job {job_id!r}; list your jobs with %alchemist_jobs")
    if record.owner != config.current_user():
        raise PermissionDeniedError(f"job {job_id!r} belongs to another user")
    return Job(record)


# The option names in the docstrings come from the one table, so they cannot go stale.
_OPTION_NAMES = ", ".join(f"``{opt.name}``" for opt in options_for("python"))
for _documented in (make_spec, submit):
    _documented.__doc__ = (_documented.__doc__ or "").replace("{option_names}", _OPTION_NAMES)
