"""The REST API described as OpenAPI 3 (``GET /alchemist/api/v1/openapi.json``).

The submit body's schema comes from the job-options table (:mod:`alchemist.job.options`);
the routes and their query arguments are those :mod:`alchemist.server.handlers`
serves (``tests/server/test_openapi.py`` checks the two against each other and fuzzes
every route from this document).
"""

from __future__ import annotations

from typing import Any

from alchemist.job.options import options_for

_JSON_SCHEMA: dict[str, dict[str, Any]] = {
    "bool": {"type": "boolean"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "str": {"type": "string"},
    "kv": {"type": "object", "additionalProperties": {"type": "string"}},
    "kv_typed": {"type": "object"},
    "names": {"type": "array", "items": {"type": "string"}},
}

_ERROR = {
    "type": "object",
    "required": ["message"],
    "properties": {"message": {"type": "string"}, "field": {"type": "string"}},
}


def _submit_body() -> dict[str, Any]:
    props: dict[str, Any] = {
        "path": {
            "type": "string",
            "description": "the .py script or .ipynb notebook to run, under the server's root",
        }
    }
    for opt in options_for("rest"):
        schema: dict[str, Any] = {**_JSON_SCHEMA[opt.type], "description": opt.help}
        if opt.default is None:
            schema["nullable"] = True
        if opt.choices:
            schema["enum"] = list(opt.choices)
        if opt.minimum is not None:
            schema["minimum"] = opt.minimum
        if opt.maximum is not None:
            schema["maximum"] = opt.maximum
        props[opt.name] = schema
    return {
        "type": "object",
        "required": ["path"],
        "additionalProperties": False,
        "properties": props,
    }


def _int(name: str, description: str, minimum: int, maximum: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": minimum}
    if maximum is not None:
        schema["maximum"] = maximum
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def _text(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": {"type": "string"},
    }


def _op(
    summary: str,
    ok: int = 200,
    params: list[Any] | None = None,
    body: bool = False,
    of: str = "job",
) -> Any:
    """An operation on the user's jobs (``of="sweep"``: on the user's sweeps)."""
    responses: dict[str, Any] = {
        str(ok): {"description": "done", "content": {"application/json": {"schema": {}}}},
        "400": _error_response("bad input: the message says which and how"),
        "403": _error_response("another user's job"),
        "404": _error_response(f"no such {of}"),
    }
    if of == "sweep":  # a sweep's folder is under its user's own home: none is another's
        del responses["403"]
    op: dict[str, Any] = {"summary": summary, "parameters": params or [], "responses": responses}
    if body:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Submit"}}},
        }
    return op


def _diagnosis_op(params: list[Any]) -> dict[str, Any]:
    """The diagnosis report's route, and with ``partial=1`` the partial report of the
    diagnosis in progress (204 when there is none)."""
    op: dict[str, Any] = _op(
        "which rank is stuck, and where: the diagnosis report (never changes the job)",
        params=[
            *params,
            _int(
                "partial",
                "1: at once, the latest partial report of a diagnosis of the job in progress"
                " (who answered, who is awaited; asks the ranks nothing)",
                0,
            ),
        ],
    )
    op["responses"]["204"] = {"description": "partial=1 and no diagnosis in progress"}
    return op


def _bundle_op(params: list[Any]) -> dict[str, Any]:
    """The debug bundle's route: a ``.tar.gz`` attachment, not JSON."""
    op: dict[str, Any] = _op(
        "the debug bundle: a .tar.gz of the diagnosis report, every rank's stacks and flight"
        " recorder, log tails and the spec (never changes the job)",
        params=params,
    )
    op["responses"]["200"] = {
        "description": "the bundle, as an attachment (alchemist-<id>-debug.tar.gz)",
        "headers": {"Content-Disposition": {"schema": {"type": "string"}}},
        "content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
    }
    return op


def _error_response(text: str) -> dict[str, Any]:
    return {
        "description": text,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def document(base_url: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.0 document of the API under ``base_url``."""
    from alchemist import __version__
    from alchemist.server.handlers import MAX_LOG_CURSOR

    job = [{"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    # The sweep routes share the jobs' id pattern (and so its name in the path).
    sweep = [
        {
            "name": "job_id",
            "in": "path",
            "required": True,
            "description": "the sweep's id: w and 10 hex digits (alchemist sweep list)",
            "schema": {"type": "string"},
        }
    ]
    root = base_url.rstrip("/") + "/alchemist/api/v1"
    paths = {
        "": {"get": _op("version, backends, algorithms, states and the job options")},
        "/openapi.json": {"get": _op("this document")},
        "/jobs": {
            "get": _op(
                "a page of the current user's jobs, newest first (and those that could not"
                " be read), with the cursor of the next page (next)",
                params=[
                    _text("state", "only jobs in this state"),
                    _int("limit", "at most this many", 1),
                    _text("before", "the page after this cursor (the next of a page)"),
                ],
            ),
            "post": _op("submit a file as a job", ok=201, body=True),
        },
        "/jobs/dryrun": {"post": _op("what a submission would run; submits nothing", body=True)},
        "/jobs/{job_id}": {
            "get": _op("one job", params=job),
            "delete": _op("cancel the job (idempotent)", params=job),
        },
        "/jobs/{job_id}/metrics": {
            "get": _op(
                "metric events after a cursor; or (view=summary) every metric of every"
                " rank downsampled, and the cursor after it",
                params=[
                    *job,
                    _text("since", "the cursor a previous read returned"),
                    _int("max_bytes", "read about this much at most", 1),
                    _text("view", "events (default) or summary"),
                    _int("max_points", "view=summary: points per series at most", 8),
                ],
            )
        },
        "/jobs/{job_id}/logs": {
            "get": _op(
                "one rank's log lines after a byte cursor",
                params=[
                    *job,
                    _int("rank", "the rank", 0),
                    _int("since", "byte offset to read from", 0, MAX_LOG_CURSOR),
                    _int("limit_bytes", "read this much at most", 1),
                    _int("tail", "the last N lines instead, read from the end", 0),
                ],
            )
        },
        "/jobs/{job_id}/dryrun": {"get": _op("the exact request the backend made", params=job)},
        "/jobs/{job_id}/tensorboard": {
            "post": _op("start (or reuse) TensorBoard on the job", params=job)
        },
        "/jobs/{job_id}/diagnosis": {
            "get": _diagnosis_op(job),
        },
        "/jobs/{job_id}/diagnosis/bundle": {"get": _bundle_op(job)},
        "/pool": {
            "get": _op("your warm pool of local ranks: running, status, ranks, idle time"),
            "delete": _op("stop your warm pool (running ranks go on)"),
        },
        "/sweeps": {
            "get": _op(
                "your sweeps, newest first: {sweeps: [each one's id, name, created, state,"
                " reason, objective, mode, trials_done of trials_total, counts by state,"
                " best trial], skipped: [those that could not be read: id, reason]}",
                of="sweep",
            )
        },
        "/sweeps/{job_id}": {
            "get": _op(
                "one sweep: its spec, state and reason, every trial (number, params, state,"
                " step, value, job_id, reason) and the best",
                params=sweep,
                of="sweep",
            ),
            "delete": _op(
                "cancel the sweep and its running trials (idempotent); the sweep afterwards",
                params=sweep,
                of="sweep",
            ),
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "Alchemist REST API", "version": __version__},
        "servers": [{"url": root}],
        "paths": paths,
        "components": {"schemas": {"Submit": _submit_body(), "Error": _ERROR}},
    }
