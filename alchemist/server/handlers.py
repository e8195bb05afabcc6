"""REST handlers of the Alchemist server extension (the API the JupyterLab panel calls).

Routes, relative to the server's base URL (``/user/<name>/`` behind JupyterHub)::

    GET    alchemist/api/v1                      version, backends, algorithms, states and
                                                 the job options (the panel's form)
    GET    alchemist/api/v1/openapi.json         this API as an OpenAPI 3 document
    GET    alchemist/api/v1/jobs?state=&limit=   the current user's jobs, newest first
    POST   alchemist/api/v1/jobs                 submit a .py or .ipynb file as a job
    POST   alchemist/api/v1/jobs/dryrun          what that submission would run; submits nothing
    GET    alchemist/api/v1/jobs/ID              one job
    DELETE alchemist/api/v1/jobs/ID              cancel it (idempotent)
    GET    alchemist/api/v1/jobs/ID/metrics?since=CURSOR&max_bytes=N
    GET    alchemist/api/v1/jobs/ID/metrics?view=summary&max_points=N   the whole history
                                                 downsampled, and the cursor after it
    GET    alchemist/api/v1/jobs/ID/logs?rank=R&since=CURSOR&limit_bytes=N
    GET    alchemist/api/v1/jobs/ID/logs?rank=R&tail=N   the last N lines, read from the end;
                                                 ``cursor`` follows on from them
    GET    alchemist/api/v1/jobs/ID/dryrun       the exact request the backend makes for it
    POST   alchemist/api/v1/jobs/ID/tensorboard  start (or reuse) TensorBoard: ``{"url"}``
    GET    alchemist/api/v1/jobs/ID/diagnosis    which rank is stuck, and where (the report
                                                 of :mod:`alchemist.diagnosis.report`);
                                                 ``?partial=1``: the partial report of the
                                                 diagnosis in progress (204: none)
    GET    alchemist/api/v1/jobs/ID/diagnosis/bundle  the debug bundle, a .tar.gz download
                                                 (:mod:`alchemist.diagnosis.bundle`)
    GET    alchemist/api/v1/pool                 the user's warm pool: ``{"running", "text",
                                                 "ranks", "jobs", "idle_s", "ends_in_s"...}``
    DELETE alchemist/api/v1/pool                 stop it (running ranks go on)
    GET    alchemist/api/v1/sweeps               the current user's sweeps, newest first:
                                                 ``{"sweeps": [summary...], "skipped"}``
                                                 (:func:`alchemist.sweep.text.summary`)
    GET    alchemist/api/v1/sweeps/ID            one sweep: ``Sweep.to_dict()`` (its spec,
                                                 state, every trial, the best)
    DELETE alchemist/api/v1/sweeps/ID            cancel it and its running trials
                                                 (idempotent); replies with the sweep after

Contract:

- Every verb needs an authenticated user (``@web.authenticated``) and passes the
  server's authorizer on the ``kernels`` resource (reads for GET, writes otherwise):
  submitting a job runs code, like a kernel does.
- Bodies and replies are strict JSON (RFC 8259): a body holding ``NaN`` or
  ``Infinity`` is bad JSON, and a number in a reply that is not finite (a NaN loss, a
  job stored by an earlier version with an infinite timeout) is written as ``null``
  (:func:`strict_json`). An error is ``{"message": "<one line>"}`` (plus ``"field"``
  when one input is at fault) with status 400 (bad input: bad JSON, an unknown or
  invalid field, a number out of range or not finite, a cursor no read returned), 403
  (another user's job), 404 (no such job or sweep, or an id that is none), 501 (a
  feature not installed) or 500.
- The handlers call the client API (:mod:`alchemist.client`): submitting here and
  from the magic is one code path. Every call that may block (the job store, the
  backend, the file system) runs in a worker thread, off the event loop.
- Logs and metrics are read from a cursor and bounded per request; the reply's
  ``cursor`` is where the next request starts. A log cursor is a byte offset (an
  integer, at most :data:`MAX_LOG_CURSOR`; one past the end of the log reads nothing
  and stays); a metrics cursor is an opaque string (the offset reached in each rank's
  file, see :mod:`alchemist.metrics.reader`), passed back as it came. Metric lines
  that are not well-formed events are skipped, and counted in the reply's
  ``skipped``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.client import responses
from pathlib import Path
from typing import Any, TypeVar

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from alchemist.errors import (
    AlchemistError,
    BackendError,
    BundleError,
    CursorError,
    JobNotFoundError,
    PermissionDeniedError,
    SpecError,
    UnknownBackendError,
)
from alchemist.job.algorithms import catalogue as algorithm_catalogue
from alchemist.job.algorithms import check as check_algorithm_options
from alchemist.job.jobdir import JobDir
from alchemist.job.options import check_body_types, describe_options, options_for
from alchemist.job.spec import ALGORITHMS, JobState

#: Root of the versioned API, relative to the server's base URL.
API_ROOT = "alchemist/api/v1"

#: Default and largest bytes of log read per request.
DEFAULT_LOG_BYTES = 256 * 1024
MAX_LOG_BYTES = 1024 * 1024
#: The most lines ``?tail=N`` returns (within ``limit_bytes``).
MAX_LOG_TAIL_LINES = 100_000
#: The largest log cursor (``since``): the largest integer a JSON reader (the panel's
#: JavaScript) holds exactly; a larger one is a 400, not a cursor any read returned.
MAX_LOG_CURSOR = (1 << 53) - 1
#: Default and largest bytes of metrics read per request.
DEFAULT_METRICS_BYTES = 1024 * 1024
MAX_METRICS_BYTES = 4 * 1024 * 1024
#: ``?view=summary``: points per series (default, largest), points in all, and bytes
#: after the cached summaries folded per request (about 1 s; more: ask again).
DEFAULT_SUMMARY_POINTS = 1000
MAX_SUMMARY_POINTS = 4000
SUMMARY_REPLY_POINTS = 50_000
SUMMARY_FOLD_BYTES = 8 << 20
#: Bytes read from the end of a rank's metrics file to find a job's latest event.
LATEST_TAIL_BYTES = 16 * 1024
#: Default and largest number of jobs in a listing.
DEFAULT_LIST_LIMIT = 200
MAX_LIST_LIMIT = 1000

_ID = r"(?P<job_id>[A-Za-z0-9][A-Za-z0-9_.-]{0,63})"

T = TypeVar("T")


def _shown(text: str) -> str:
    """A user's text in a one-line message: as is when printable, else quoted."""
    return text if text.isprintable() else repr(text)


def _clipped(text: str, limit: int = 40) -> str:
    """A user's value quoted in a message, cut to about ``limit`` characters."""
    return repr(text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)")


#: An integer in a query argument: int() refuses one of over 4300 digits (too large).
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")


def _finite(value: Any) -> Any:
    """``value`` with every float that is not finite (NaN, ±inf) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def strict_json(data: Any) -> str:
    """``data`` as strict JSON (RFC 8259), which every JSON parser reads.

    Python's ``json`` writes a float that is not finite as the bare word ``NaN`` or
    ``Infinity``, which no JSON parser reads (``JSON.parse`` in the panel fails on the
    whole reply): such a number is written as ``null`` instead. A NaN loss is a real
    metric value, and a job an earlier version stored with an infinite timeout must
    still list.

    Raises:
        RouteError: 500, when ``data`` still cannot be written as strict JSON.
    """
    try:
        return json.dumps(data, allow_nan=False)
    except ValueError:
        pass
    try:
        return json.dumps(_finite(data), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise RouteError(
            500, f"internal error: the reply cannot be written as strict JSON ({e})"
        ) from None


def _no_constant(word: str) -> Any:
    raise ValueError(f"{word} is not a JSON number (write a finite number, or null)")


def _one_line(message: str) -> str:
    """``message`` with line breaks and other control characters written as escapes."""
    if message.isprintable():
        return message
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


class RouteError(web.HTTPError):
    """An error reply: ``status`` and one line, optionally naming the input ``field``."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(status)
        self.message = message
        self.field = field


#: Fields of a submission body besides the job options (alchemist.job.options, "rest").
_BODY_FIELDS = ("path",)


def _translate(error: BaseException) -> RouteError:
    """Map a domain error to its HTTP status; anything else is a 500 with one line."""
    if isinstance(error, RouteError):
        return error
    if isinstance(error, JobNotFoundError):
        return RouteError(404, str(error))
    if isinstance(error, PermissionDeniedError):
        return RouteError(403, str(error))
    if isinstance(error, UnknownBackendError):
        return RouteError(400, str(error), "backend")
    if isinstance(error, CursorError):
        return RouteError(400, str(error), "since")
    if isinstance(error, (SpecError, BundleError)):
        return RouteError(400, str(error))
    if isinstance(error, BackendError):
        return RouteError(502, str(error))
    if isinstance(error, AlchemistError):
        return RouteError(400, str(error))
    return RouteError(
        500,
        f"internal error in the Alchemist server extension ({type(error).__name__}: {error});"
        " see the Jupyter server log",
    )


class AlchemistHandler(APIHandler):
    """Base of every route: JSON errors, query parsing, blocking calls in threads."""

    # Submitting a job runs the user's code, as a kernel does: authorize like kernels.
    auth_resource = "kernels"

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Reply ``{"message", "field"?}`` for every error, never an HTML page."""
        exc_info = kwargs.get("exc_info")
        error = exc_info[1] if exc_info else None
        reply: dict[str, Any]
        if isinstance(error, RouteError):
            reply = {"message": error.message}
            if error.field:
                reply["field"] = error.field
        elif isinstance(error, web.HTTPError):
            message = error.log_message or error.reason or responses.get(status_code, "")
            if error.log_message and error.args:
                message = error.log_message % error.args
            reply = {"message": message}
        else:
            reply = {"message": responses.get(status_code, "error")}
        # One line, whatever the user's input that a message quotes holds.
        reply["message"] = _one_line(str(reply["message"]))
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(reply))  # strings only: strict JSON

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        # A user's mistake (4xx) is no server fault: log one line, not a traceback.
        if isinstance(value, RouteError) and value.status_code < 500:
            self.log.info("alchemist API %s: %s", value.status_code, value.message)
            return
        super().log_exception(typ, value, tb)

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking client call in a thread of this extension's own (a slow one,
        :data:`SLOW_CALLS`, in the slow pool); domain errors become JSON replies."""
        pool = _SLOW_POOL if fn in SLOW_CALLS else _QUICK_POOL
        try:
            return await asyncio.get_running_loop().run_in_executor(
                pool, functools.partial(fn, *args, **kwargs)
            )
        except web.HTTPError:
            raise
        except Exception as e:
            raise _translate(e) from e

    def query(
        self,
        allowed: dict[str, tuple[int, int, int]],
        text: tuple[str, ...] = (),
        exact: tuple[str, ...] = (),
    ) -> dict[str, int]:
        """Parse integer query arguments; reject unknown ones.

        Args:
            allowed: per name, ``(default, minimum, maximum)``; a value above the
                maximum is clamped to it (a bounded read), one below is an error.
            text: names of further (text) arguments the route reads itself.
            exact: names of ``allowed`` whose value above the maximum is an error too
                (a cursor: clamping would make one no read returned).

        Raises:
            RouteError: 400 for an unknown argument, one that is not an integer, or one
                out of range.
        """
        known = set(allowed) | set(text)
        # JupyterLab's ServerConnection adds a bare ``?<timestamp>`` to GETs to defeat
        # caches: an argument without a value is ignored; one with a value must be known.
        given = {k for k, v in self.request.query_arguments.items() if any(v)}
        unknown = sorted(given - known)
        if unknown:
            raise RouteError(
                400,
                f"unknown query argument(s): {', '.join(_shown(u) for u in unknown)};"
                f" allowed: {', '.join(sorted(known)) or 'none'}",
                unknown[0],
            )
        out: dict[str, int] = {}
        for name, (default, low, high) in allowed.items():
            raw = self.get_query_argument(name, None)
            if raw is None or raw == "":
                out[name] = default
                continue
            try:
                value = int(raw)
            except ValueError:
                if not _INTEGER.fullmatch(raw):
                    raise RouteError(
                        400, f"{name} must be an integer, got {_clipped(raw)}", name
                    ) from None
                # too many digits for int(): beyond either bound
                value = low - 1 if raw.strip().startswith("-") else high + 1
            if value < low:
                raise RouteError(
                    400, f"{name} must be at least {low}, got {_clipped(raw.strip())}", name
                )
            if value > high and name in exact:
                raise RouteError(
                    400,
                    f"{name} must be at most {high}, got {_clipped(raw.strip())}: pass back"
                    " the cursor a read returned",
                    name,
                )
            out[name] = min(value, high)
        return out

    def _root_dir(self) -> Path:
        """The directory submitted paths are relative to (the server's root)."""
        return Path(self.settings.get("server_root_dir") or os.getcwd())

    def reply(self, data: Any, status: int = 200) -> None:
        """Write ``data`` as the reply: strict JSON, always (:func:`strict_json`)."""
        text = strict_json(data)
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(text)

    def json_body(self) -> dict[str, Any]:
        """The request body as a JSON object.

        Raises:
            RouteError: 400 when the body is not strict JSON (``NaN``, ``Infinity``) or
                not an object.
        """
        raw = self.request.body or b"{}"
        try:
            data = json.loads(raw, parse_constant=_no_constant)
        except ValueError as e:
            raise RouteError(400, f"the request body is not valid JSON: {e}")
        if not isinstance(data, dict):
            raise RouteError(400, "the request body must be a JSON object")
        return data


# -- blocking helpers run in threads ------------------------------------------------------


def _newest_event_in_tail(path: Path, rank: int | None = None) -> dict[str, Any] | None:
    """The newest well-formed event (of ``rank``, if given) in the last few KiB of a file."""
    from alchemist.metrics.reader import parse_event

    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - LATEST_TAIL_BYTES))
            tail = f.read()
    except FileNotFoundError:
        return None
    for line in reversed(tail.decode("utf-8", "replace").split("\n")):
        event = parse_event(line.strip())
        if event is not None and (rank is None or event.get("rank") == rank):
            return event
    return None


def _latest_event(job_dir: JobDir) -> dict[str, Any] | None:
    """The job's latest metric event, read from the tail of one file or a few, or None.

    Rank 0's view is the job's, when it logs: the newest event in the tail of rank 0's
    file; when rank 0 has logged nothing, that of the lowest rank that has. Reading only
    tails, of the first file that has an event, keeps a listing cheap however long the
    jobs ran and however many ranks they had.
    """
    shared = job_dir.shared_metrics()  # a job written before per-rank files
    if shared.exists():
        event = _newest_event_in_tail(shared, rank=0) or _newest_event_in_tail(shared)
        if event is not None:
            return event
    for path in job_dir.metrics_by_rank().values():  # rank 0 first
        event = _newest_event_in_tail(path)
        if event is not None:
            return event
    return None


def _describe(job: Any) -> dict[str, Any]:
    """``Job.to_dict()`` plus the latest metric event (for the list's metric column)."""
    data: dict[str, Any] = job.to_dict()
    data["latest"] = _latest_event(job.job_dir)
    return data


def _list_jobs(state: str | None, limit: int, before: str | None = None) -> dict[str, Any]:
    """A page of the user's jobs, those that could not be read (listed apart, with
    why), and the cursor of the next page (``next``; null on the last)."""
    from alchemist import client

    listing = client.list_jobs(state=state or None, limit=limit, before=before or None)
    jobs, skipped = [], [{"id": i, "reason": why} for i, why in listing.skipped]
    for job in listing.jobs:
        try:
            jobs.append(_describe(job))
        except Exception as e:  # one unreadable job never fails the list
            skipped.append({"id": job.id, "reason": str(e).splitlines()[0] if str(e) else repr(e)})
    return {"jobs": jobs, "skipped": skipped, "next": listing.next}


def _job(job_id: str) -> Any:
    from alchemist import client

    return client.attach(job_id)


def _get_job(job_id: str) -> dict[str, Any]:
    return _describe(_job(job_id))


def _cancel_job(job_id: str) -> dict[str, Any]:
    job = _job(job_id)
    job.cancel()
    return _describe(job)


def _job_dryrun(job_id: str) -> dict[str, Any]:
    from alchemist.backends.api import JobRequest

    job = _job(job_id)
    info = job.backend.dryrun(JobRequest(job.id, job.owner, job.spec, job.job_dir))
    return {"job_id": job.id, **info.to_dict()}


def _metrics(job_id: str, since: str, max_bytes: int) -> dict[str, Any]:
    from alchemist.metrics.reader import MetricsReader

    job = _job(job_id)
    reader = MetricsReader(job.job_dir)
    chunk = reader.read_chunk(since, max_bytes=max_bytes)
    # skipped: the lines of this read that were not well-formed events
    return {
        "events": chunk.events,
        "cursor": chunk.cursor,
        "more": chunk.more,
        "skipped": reader.skipped,
    }


def _metrics_summary(job_id: str, max_points: int) -> dict[str, Any]:
    """``?view=summary``: every metric of every rank downsampled (at most ``max_points``
    a series, and :data:`SUMMARY_REPLY_POINTS` in all), from the job's cached summaries
    plus at most :data:`SUMMARY_FOLD_BYTES` after them; ``cursor`` continues with the
    events after it, ``complete`` says whether the summary reached the end (if not,
    ask again: the work is cached)."""
    import numpy as np

    from alchemist.metrics.downsample import minmax_downsample
    from alchemist.metrics.reader import MetricsReader

    job = _job(job_id)
    ov = MetricsReader(job.job_dir).overview(max_points, max_bytes=SUMMARY_FOLD_BYTES)
    per_series = max(8, min(max_points, SUMMARY_REPLY_POINTS // max(1, len(ov.series))))
    series = []
    for (name, rank), s in ov.series.items():
        x, y = np.asarray(s.steps, float), np.asarray(s.values, float)
        x, y = minmax_downsample(x, y, per_series)
        series.append(
            {
                "metric": name,
                "rank": rank,
                "count": s.logged,
                "steps": x.tolist(),
                "values": y.tolist(),
            }
        )
    return {
        "view": "summary",
        "metrics": ov.metrics,
        "series": series,
        "progress": {str(r): p for r, p in ov.progress.items()},
        "cursor": ov.cursor,
        "complete": ov.complete,
        "skipped": ov.skipped,
    }


def _logs(
    job_id: str, rank: int, since: int, limit_bytes: int, tail: int | None = None
) -> dict[str, Any]:
    from alchemist.backends.api import LogChunk

    job = _job(job_id)
    if tail is None and since > _size(job.job_dir.rank_log(rank)):
        # a cursor past the end reads nothing (a file system may refuse to seek there)
        chunk = LogChunk(rank=rank, lines=[], cursor=since, truncated=False)
    elif tail is None:
        chunk = job.log_chunk(rank, since, limit_bytes)
    else:  # the last lines, read from the end (constant time); follow from its cursor
        chunk = job.log_tail(rank, tail, limit_bytes)
    return {
        "rank": chunk.rank,
        "lines": chunk.lines,
        "cursor": chunk.cursor,
        "truncated": chunk.truncated,
        "ranks": job.ranks(),
    }


def _size(path: Path) -> int:
    """The size of ``path`` in bytes (0 when it does not exist yet)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _submit(path: Path, options: dict[str, Any], dry_run: bool) -> dict[str, Any]:
    from alchemist import client

    result = client.submit(path, dry_run=dry_run, **options)
    if dry_run:
        data: dict[str, Any] = result.to_dict()
        return data
    described = _describe(result)
    described["warnings"] = list(result.warnings)
    return described


#: job id → (a token of the diagnosis in progress, its latest partial report): what
#: ``GET .../diagnosis?partial=1`` shows while a ``GET .../diagnosis`` waits for ranks.
_partials: dict[str, tuple[object, dict[str, Any]]] = {}
_partials_lock = threading.Lock()


def _diagnosis(job_id: str) -> dict[str, Any]:
    """The job's report; while the ranks answer, its partial reports are kept for
    :func:`_diagnosis_partial` (the latest one, until the report is made)."""
    job = _job(job_id)
    token = object()

    def keep(partial: dict[str, Any]) -> None:
        with _partials_lock:
            _partials[job.id] = (token, partial)

    try:
        return dict(job.diagnose(on_partial=keep))
    finally:
        with _partials_lock:
            if _partials.get(job.id, (None,))[0] is token:
                del _partials[job.id]


def _diagnosis_partial(job_id: str) -> dict[str, Any] | None:
    """The latest partial report of a diagnosis of the job in progress on this server,
    or None; asks the ranks nothing."""
    job = _job(job_id)  # 404 and 403 as for the report
    with _partials_lock:
        found = _partials.get(job.id)
    return found[1] if found else None


def _diagnosis_bundle(job_id: str) -> tuple[str, bytes]:
    """``(file name, .tar.gz bytes)``: a fresh diagnosis and the job's debug material."""
    from alchemist.diagnosis.bundle import bundle_bytes, bundle_name

    job = _job(job_id)
    return bundle_name(job.id), bundle_bytes(job.job_dir, job.diagnose())


def _tensorboard(job_id: str) -> Any:
    job = _job(job_id)
    try:
        from alchemist.tensorboard import open_tensorboard
    except ImportError:
        raise RouteError(501, "TensorBoard support is not part of this alchemist installation")
    return open_tensorboard(job)


# -- request validation ---------------------------------------------------------------------


def _check_submit_body(data: dict[str, Any], root_dir: Path) -> tuple[Path, dict[str, Any]]:
    """Validate a submission body; return the file to run and the client options.

    Raises:
        RouteError: 400 naming the field: unknown, missing, of the wrong type, an unknown
            algorithm or a bad algorithm option, or a path outside the server's root,
            missing, or not a .py/.ipynb file.
    """
    allowed = [*_BODY_FIELDS, *(opt.name for opt in options_for("rest"))]
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise RouteError(
            400,
            f"unknown field(s): {', '.join(unknown)}; allowed: {', '.join(allowed)}",
            unknown[0],
        )
    if not isinstance(data.get("path", ""), str):
        raise RouteError(400, f"path must be a string, got {json.dumps(data['path'])}", "path")
    bad = check_body_types(data)
    if bad is not None:
        raise RouteError(400, bad[1], bad[0])
    algorithm = data.get("algorithm") or "sync"
    try:
        check_algorithm_options(algorithm, data.get("algorithm_options") or {})
    except SpecError as e:
        field = "algorithm_options" if algorithm in ALGORITHMS else "algorithm"
        raise RouteError(400, str(e), field) from None
    raw_path = data.get("path")
    if not raw_path:
        raise RouteError(400, "path is required: the .py or .ipynb file to run", "path")
    if not isinstance(raw_path, str):
        raise RouteError(400, f"path must be a string, got {json.dumps(raw_path)}", "path")
    root = root_dir.expanduser().resolve()
    try:
        full = (root / raw_path.lstrip("/")).resolve()
        is_file = full.is_file()
    except (OSError, ValueError):  # a NUL byte, a name too long, a loop of links
        raise RouteError(400, f"path {raw_path!r} is not a usable file name", "path") from None
    if full != root and root not in full.parents:
        raise RouteError(400, f"path {raw_path!r} is outside the server's root directory", "path")
    if full.suffix not in (".py", ".ipynb"):
        raise RouteError(400, f"path {raw_path!r} is not a .py script or .ipynb notebook", "path")
    if not is_file:
        raise RouteError(400, f"path {raw_path!r} does not exist under the server's root", "path")
    # An empty name means "not given": the job is named after the file.
    options = {
        k: v for k, v in data.items() if k != "path" and v is not None and (k, v) != ("name", "")
    }
    return full, options


# -- handlers --------------------------------------------------------------------------------


class RootHandler(AlchemistHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        from alchemist import __version__
        from alchemist.backends import backend_names

        self.query({})
        self.reply(
            {
                "version": __version__,
                "backends": backend_names(),
                "algorithms": list(ALGORITHMS),
                "states": [state.value for state in JobState],
                "algorithm_options": algorithm_catalogue(),
                # The panel builds its launch form from these (alchemist.job.options).
                "job_options": describe_options("rest"),
            }
        )


class OpenApiHandler(AlchemistHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        from alchemist.server.openapi import document

        self.query({})
        self.reply(document(self.base_url))


class JobsHandler(AlchemistHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        """A page of the current user's jobs, newest first (``?state=`` filters,
        ``?before=`` is the ``next`` of the previous page)."""
        args = self.query(
            {"limit": (DEFAULT_LIST_LIMIT, 1, MAX_LIST_LIMIT)}, text=("state", "before")
        )
        state = self.get_query_argument("state", "") or None
        if state is not None:
            from alchemist.job.spec import JobState

            states = [s.value for s in JobState]
            if state not in states:
                raise RouteError(
                    400, f"state {state!r} is unknown; choose one of {', '.join(states)}", "state"
                )
        before = self.get_query_argument("before", "") or None
        if before is not None:
            from alchemist.client import parse_page_cursor

            try:
                parse_page_cursor(before)
            except CursorError as e:
                raise RouteError(400, str(e), "before") from None
        self.reply(await self.call(_list_jobs, state, args["limit"], before))

    @web.authenticated
    @authorized
    async def post(self) -> None:
        """Submit a file as a job; replies 201 with the job."""
        self.query({})
        path, options = _check_submit_body(self.json_body(), self._root_dir())
        job = await self.call(_submit, path, options, False)
        self.set_header("Location", url_path_join(self.base_url, API_ROOT, "jobs", job["id"]))
        self.reply(job, status=201)


class DryRunPreviewHandler(AlchemistHandler):
    @web.authenticated
    @authorized
    async def post(self) -> None:
        """What submitting this body would run; submits nothing."""
        self.query({})
        path, options = _check_submit_body(self.json_body(), self._root_dir())
        self.reply(await self.call(_submit, path, options, True))


class JobHandler(AlchemistHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        self.query({})
        self.reply(await self.call(_get_job, job_id))

    @web.authenticated
    @authorized
    async def delete(self, job_id: str) -> None:
        """Cancel the job (idempotent); replies with the job as it is afterwards."""
        self.query({})
        self.reply(await self.call(_cancel_job, job_id))


class MetricsHandler(AlchemistHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        args = self.query(
            {
                "max_bytes": (DEFAULT_METRICS_BYTES, 1, MAX_METRICS_BYTES),
                "max_points": (DEFAULT_SUMMARY_POINTS, 8, MAX_SUMMARY_POINTS),
            },
            text=("since", "view"),
        )
        view = self.get_query_argument("view", "") or "events"
        since = self.get_query_argument("since", "")  # a cursor; _metrics checks it
        if view == "summary":
            for name in ("since", "max_bytes"):
                if self.get_query_argument(name, ""):
                    raise RouteError(
                        400,
                        f"{name} is for view=events: a summary covers the history from the"
                        " start; read on from the cursor it returns",
                        name,
                    )
            self.reply(await self.call(_metrics_summary, job_id, args["max_points"]))
            return
        if view != "events":
            raise RouteError(400, f"view must be events or summary, got {_shown(view)}", "view")
        if self.get_query_argument("max_points", ""):
            raise RouteError(400, "max_points is for view=summary", "max_points")
        self.reply(await self.call(_metrics, job_id, since, args["max_bytes"]))


class LogsHandler(AlchemistHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        args = self.query(
            {
                "rank": (0, 0, 1 << 20),
                "since": (0, 0, MAX_LOG_CURSOR),
                "limit_bytes": (DEFAULT_LOG_BYTES, 1, MAX_LOG_BYTES),
                "tail": (0, 0, MAX_LOG_TAIL_LINES),
            },
            exact=("since",),
        )
        tail: int | None = None
        if self.get_query_argument("tail", ""):
            if self.get_query_argument("since", ""):
                raise RouteError(
                    400, "tail reads the last lines: pass since or tail, not both", "tail"
                )
            tail = args["tail"]
        self.reply(
            await self.call(_logs, job_id, args["rank"], args["since"], args["limit_bytes"], tail)
        )


class JobDryRunHandler(AlchemistHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        self.query({})
        self.reply(await self.call(_job_dryrun, job_id))


class DiagnosisHandler(AlchemistHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        """The job's diagnosis report; reading it never changes the job's state.
        ``?partial=1``: the latest partial report of a diagnosis of the job in progress
        (``collecting`` true: who answered, who is awaited), at once; 204 when none is."""
        if self.query({"partial": (0, 0, 1)})["partial"]:
            partial = await self.call(_diagnosis_partial, job_id)
            if partial is None:
                self.set_status(204)
                self.finish()
            else:
                self.reply(partial)
            return
        self.reply(await self.call(_diagnosis, job_id))


class DiagnosisBundleHandler(AlchemistHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        """The job's debug bundle (a ``.tar.gz`` attachment: the report, every rank's
        stacks and flight recorder, log tails, the spec); never changes the job."""
        from alchemist.diagnosis.bundle import MEDIA_TYPE

        self.query({})
        name, data = await self.call(_diagnosis_bundle, job_id)
        self.set_status(200)
        self.set_header("Content-Disposition", f'attachment; filename="{name}"')
        self.finish(data, set_content_type=MEDIA_TYPE)  # APIHandler's default is JSON


def _pool_status() -> dict[str, Any]:
    from alchemist.backends.local.pool import state

    return state.status()


def _pool_stop() -> dict[str, Any]:
    from alchemist.backends.local.pool import client as pool_client

    pool_client.stop()
    return _pool_status()


class PoolHandler(AlchemistHandler):
    """The user's warm pool of local ranks (:mod:`alchemist.backends.local.pool`): this
    server runs as the user, so the pool it reads and stops is that user's alone."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.query({})
        self.reply(await self.call(_pool_status))

    @web.authenticated
    @authorized
    async def delete(self) -> None:
        """Stop the pool (running ranks go on); replies with the status afterwards."""
        self.query({})
        self.reply(await self.call(_pool_stop))


def _list_sweeps() -> dict[str, Any]:
    """The user's sweeps, newest first, and those that could not be read (with why)."""
    from alchemist.sweep import api as sweep_api
    from alchemist.sweep.text import summary

    found, skipped = [], []
    for sweep in sweep_api.sweeps():
        try:
            found.append(summary(sweep))
        except Exception as e:  # one unreadable sweep never fails the list
            skipped.append(
                {"id": sweep.id, "reason": str(e).splitlines()[0] if str(e) else repr(e)}
            )
    return {"sweeps": found, "skipped": skipped}


def _get_sweep(sweep_id: str) -> dict[str, Any]:
    from alchemist.sweep import api as sweep_api

    return sweep_api.attach(sweep_id).to_dict()


def _cancel_sweep(sweep_id: str) -> dict[str, Any]:
    from alchemist.sweep import api as sweep_api

    sweep = sweep_api.attach(sweep_id)
    sweep.cancel()
    return sweep.to_dict()


class SweepsHandler(AlchemistHandler):
    """The user's sweeps (:mod:`alchemist.sweep`): this server runs as the user, and a
    sweep's folder is under the user's own (private) Alchemist home."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """Every sweep's summary, newest first."""
        self.query({})
        self.reply(await self.call(_list_sweeps))


class SweepHandler(AlchemistHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        """One sweep (the route's id is a sweep's, ``w`` and 10 hex digits)."""
        self.query({})
        self.reply(await self.call(_get_sweep, job_id))

    @web.authenticated
    @authorized
    async def delete(self, job_id: str) -> None:
        """Cancel the sweep and its running trials (idempotent); replies with the sweep
        as it is afterwards."""
        self.query({})
        self.reply(await self.call(_cancel_sweep, job_id))


class TensorBoardHandler(AlchemistHandler):
    @web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        """Start (or reuse) TensorBoard on the job's event files; reply ``{"url"}``.

        The URL is this server's own route to it, ``<base_url>alchemist/tensorboard/<id>/``
        (:mod:`alchemist.server.proxy`): TensorBoard listens on a private unix socket,
        and this server's base URL is right behind JupyterHub or any other proxy.
        ``ALCHEMIST_TENSORBOARD_URL`` overrides it (see :mod:`alchemist.tensorboard`).
        """
        from alchemist.tensorboard import ROUTE

        self.query({})
        self.json_body()  # no fields, but a malformed body is still an error
        handle = await self.call(_tensorboard, job_id)
        if os.environ.get("ALCHEMIST_TENSORBOARD_URL"):
            url = handle.url
        else:
            url = url_path_join(self.base_url, ROUTE, job_id) + "/"
        self.reply({"url": url})


#: Calls that may take seconds (a cancel's grace, a diagnosis asking every rank, a
#: bundle, TensorBoard's start, a submit that bundles the workspace, the pool's stop, a
#: sweep's cancel waiting for its driver to stop its trials).
SLOW_CALLS: frozenset[Callable[..., Any]] = frozenset(
    {_submit, _cancel_job, _diagnosis, _diagnosis_bundle, _tensorboard, _pool_stop, _cancel_sweep}
)
#: The extension's threads: its blocking calls never take the threads of the event
#: loop's default executor, which the Jupyter server itself relies on, and slow calls
#: (at most :data:`SLOW_THREADS` at once; the others wait their turn) never hold up the
#: quick reads the panel polls (listings, logs, metrics).
QUICK_THREADS, SLOW_THREADS = 8, 3
_QUICK_POOL = ThreadPoolExecutor(QUICK_THREADS, thread_name_prefix="alchemist-rest")
_SLOW_POOL = ThreadPoolExecutor(SLOW_THREADS, thread_name_prefix="alchemist-rest-slow")


def setup_handlers(web_app: Any) -> None:
    """Add the Alchemist routes to a Jupyter server's tornado application."""
    base = url_path_join(web_app.settings.get("base_url", "/"), API_ROOT)
    routes: list[tuple[str, type[AlchemistHandler]]] = [
        ("", RootHandler),
        ("/openapi.json", OpenApiHandler),
        ("/jobs", JobsHandler),
        ("/jobs/dryrun", DryRunPreviewHandler),
        (f"/jobs/{_ID}", JobHandler),
        (f"/jobs/{_ID}/metrics", MetricsHandler),
        (f"/jobs/{_ID}/logs", LogsHandler),
        (f"/jobs/{_ID}/dryrun", JobDryRunHandler),
        (f"/jobs/{_ID}/tensorboard", TensorBoardHandler),
        (f"/jobs/{_ID}/diagnosis", DiagnosisHandler),
        (f"/jobs/{_ID}/diagnosis/bundle", DiagnosisBundleHandler),
        ("/pool", PoolHandler),
        ("/sweeps", SweepsHandler),
        # A sweep's id in the jobs' id pattern: an id that matches it but is no sweep's
        # is a JSON 404 (as a job's), one that does not is the server's own 404.
        (f"/sweeps/{_ID}", SweepHandler),
    ]
    web_app.add_handlers(".*$", [(base + path + "/?", handler) for path, handler in routes])
