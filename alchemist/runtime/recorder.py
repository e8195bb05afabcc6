"""PyTorch's flight recorder: the collectives each rank entered, with sequence ids.

The one place that touches torch's private flight-recorder API. torch 2.13 keeps a ring
buffer of the collectives of each process group, of ``TORCH_FR_BUFFER_SIZE`` (older:
``TORCH_NCCL_TRACE_BUFFER_SIZE``) entries as the variable is when the recorder is first
used (torch's default: 2000; 0 turns it off); ``torch._C._distributed_c10d.
_dump_fr_trace_json()`` returns them as JSON. On gloo the entries carry a sequence id
(``collective_seq_id``) and an op (``profiling_name``, ``gloo:all_reduce``) but stay in
state ``scheduled``: ranks are compared by sequence id, not by state.

:func:`enable` sets a modest buffer in every rank (:mod:`alchemist.runtime.worker`, at
start-up, before torch makes a process group; a value the user set with ``--env`` is
kept); :func:`snapshot` is read inside a rank
(by :mod:`~alchemist.runtime.hooks`' responder thread). Both feature-detect: a torch
without the API gives ``None``, never an error, so no job fails for want of a recorder.
This module imports torch only inside :func:`snapshot`, which runs in a rank.

When a rank's code fails (a collective timed out, a peer died), :func:`dump_on_failure`
writes the rank's whole recorder to ``debug/recorder-rank-<r>.json`` in the job
directory: gloo raises after the process group's timeout but, unlike NCCL's watchdog,
dumps nothing itself. :func:`collective_timeout` reads that timeout from
``$ALCHEMIST_COLLECTIVE_TIMEOUT`` (seconds; torch's default when unset).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import MutableMapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from alchemist.errors import AlchemistError
from alchemist.job.jobdir import JobDir, atomic_write_json, make_private_dir

#: Entries each process group keeps: a modest ring (an entry is a few hundred bytes).
BUFFER_ENTRIES = 256
#: The variables torch reads the buffer size from (the first set wins in torch 2.13).
BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
#: Entries written into a rank's answer (the newest).
ANSWER_ENTRIES = 8
#: The variable that sets the default process group's timeout, in seconds (unset: torch's).
TIMEOUT_VAR = "ALCHEMIST_COLLECTIVE_TIMEOUT"
#: An error whose text matches this is a collective's timeout (gloo: ``Timed out waiting
#: 3000ms for recv operation``; NCCL's watchdog: ``collective operation timeout``).
_TIMEOUT_TEXT = re.compile(r"timed out|timeout", re.IGNORECASE)


def worker_variables() -> dict[str, str]:
    """The variables :func:`enable` sets."""
    return {BUFFER_VARS[0]: str(BUFFER_ENTRIES)}


def enable(environ: MutableMapping[str, str] | None = None) -> None:
    """Give this rank's recorder :data:`BUFFER_ENTRIES` entries, unless one of
    :data:`BUFFER_VARS` is set already (the user's ``--env TORCH_FR_BUFFER_SIZE=0`` turns
    it off). Call it before torch makes a process group."""
    env = os.environ if environ is None else environ
    if not any(var in env for var in BUFFER_VARS):
        env.update(worker_variables())


def _dump() -> dict[str, Any] | None:
    """torch's flight-recorder dump as a dict, or None where this torch has none."""
    # Read torch's modules, never import them: this runs in the responders' threads, and
    # an import there while the main thread imports torch deadlocks Python's module
    # locks (the main thread's import then fails with _DeadlockError).
    dist = sys.modules.get("torch.distributed")
    if dist is None or getattr(getattr(dist, "__spec__", None), "_initializing", False):
        return None  # torch.distributed not (yet wholly) imported: no process group
    c10d = getattr(sys.modules.get("torch._C"), "_distributed_c10d", None)
    try:
        dump = getattr(c10d, "_dump_fr_trace_json", None)
        if dump is None:
            return None
        data = json.loads(dump(includeCollectives=True, onlyActive=False))
    except Exception:  # a private API: any failure means "no recorder"
        return None
    return data if isinstance(data, dict) else None


def _op(entry: dict[str, Any]) -> str | None:
    """``all_reduce`` from ``gloo:all_reduce`` (or ``nccl:all_reduce``)."""
    name = entry.get("profiling_name")
    if not isinstance(name, str) or not name:
        return None
    return name.rsplit(":", 1)[-1]


def summarize(data: dict[str, Any] | None) -> dict[str, Any] | None:
    """The newest collective of a dump: ``{seq, op, state, pg, sizes, entries}``.

    ``seq`` is the ``collective_seq_id`` of the newest entry of the default process
    group (the one the ranks' own collectives use), else of any group; None when the
    dump is missing or holds no collective.
    """
    if not data:
        return None
    entries = [
        e
        for e in data.get("entries") or []
        if isinstance(e, dict) and not e.get("is_p2p") and e.get("collective_seq_id")
    ]
    if not entries:
        return None
    default = [e for e in entries if str(e.get("pg_id", "")) == "0"] or entries
    last = max(default, key=lambda e: int(e.get("collective_seq_id") or 0))
    return {
        "seq": int(last["collective_seq_id"]),
        "op": _op(last),
        "state": last.get("state"),
        "pg": last.get("pg_id"),
        "sizes": last.get("input_sizes"),
        "entries": [
            {
                "seq": e.get("collective_seq_id"),
                "op": _op(e),
                "state": e.get("state"),
                "pg": e.get("pg_id"),
                "sizes": e.get("input_sizes"),
            }
            for e in entries[-ANSWER_ENTRIES:]
        ],
    }


def snapshot() -> dict[str, Any] | None:
    """This rank's newest collective (:func:`summarize`), or None (no recorder, or
    ``torch.distributed`` not wholly imported yet). Safe in any thread: it imports
    nothing."""
    return summarize(_dump())


def format_snapshot(snap: dict[str, Any] | None) -> str:
    """The text block a rank's answer ends with; :func:`parse_block` reads it back."""
    return "Flight recorder: " + json.dumps(snap) + "\n"


def parse_block(text: str) -> dict[str, Any] | None:
    """The recorder block of an answer (:func:`format_snapshot`), or None."""
    for line in reversed(text.splitlines()):
        if line.startswith("Flight recorder: "):
            try:
                value = json.loads(line[len("Flight recorder: ") :])
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def label(snap: dict[str, Any] | None) -> str | None:
    """``all_reduce #12``, or None."""
    if not snap or snap.get("seq") is None:
        return None
    return f"{snap.get('op') or 'collective'} #{snap['seq']}"


def collective_timeout(environ: MutableMapping[str, str] | None = None) -> timedelta | None:
    """The default process group's timeout from :data:`TIMEOUT_VAR` (the rank passes it to
    ``init_process_group``); None when it is unset (torch's default: 30 minutes on gloo). A collective that waits longer fails the rank with an
    error, and :func:`dump_on_failure` keeps its recorder.

    Raises:
        AlchemistError: the variable is not a number of seconds above 0.
    """
    env = os.environ if environ is None else environ
    raw = env.get(TIMEOUT_VAR, "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise AlchemistError(f"{TIMEOUT_VAR} must be a number of seconds above 0, got {raw!r}")
    return timedelta(seconds=seconds)


def dump_path(job_dir: JobDir, rank: int) -> Path:
    """Where rank ``rank`` writes its recorder when its code fails."""
    return job_dir.debug / f"recorder-rank-{rank}.json"


def dump_on_failure(job_dir: JobDir, rank: int, error: BaseException) -> Path | None:
    """Write this rank's flight recorder to :func:`dump_path` after its code failed with
    ``error``: ``{rank, time, error, collective_timeout, newest, dump}`` (``newest``: the
    :func:`summarize` of ``dump``, torch's whole recorder). Returns the path, or None when
    there is no recorder (no process group, a torch without it, a buffer of 0) or the
    file cannot be written; never raises: the rank's own error is what matters."""
    try:
        data = _dump()
        if not data or not data.get("entries"):
            return None
        text = str(error).strip().splitlines()
        path = dump_path(job_dir, rank)
        make_private_dir(path.parent)
        atomic_write_json(
            path,
            {
                "rank": rank,
                "time": time.time(),
                "error": f"{type(error).__name__}: {text[0] if text else ''}".strip(),
                "collective_timeout": bool(_TIMEOUT_TEXT.search(str(error))),
                "newest": summarize(data),
                "dump": data,
            },
        )
        return path
    except Exception:
        return None
