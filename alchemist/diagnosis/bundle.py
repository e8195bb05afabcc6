"""The debug bundle: a job's diagnosis material in one ``.tar.gz`` to download or attach.

:func:`write_bundle` packs, under one folder ``alchemist-<id>-debug/``:

- ``report.json``: the diagnosis report (:func:`alchemist.diagnosis.report.diagnose`);
- ``spec.json`` and ``state.json``: the job as submitted and as the launcher last saw
  it;
- ``source.py``: the cell or script the ranks ran (the report's line numbers are its);
- ``stacks/rank-<r>.txt``: the stacks the report read of rank ``r`` (every thread when
  it answered on its socket or the request file; the main thread's from a signal; the
  watchdog's last dump), in faulthandler's format;
- ``debug/``: every rank's ``stacks-rank-<r>.txt`` (signal dumps),
  ``watchdog-rank-<r>.txt`` (the watchdog's) and ``recorder-rank-<r>.json`` (the flight
  recorder a rank wrote when its code failed, :func:`alchemist.runtime.recorder.
  dump_on_failure`), and the hooks markers;
- ``logs/``: the last :data:`LOG_TAIL_LINES` lines of each rank's log and of the
  launcher's;
- ``contents.json``: what each member is, where it came from, and whether it was cut.

A bundle is made to be shared, and a job's ``--env`` values are often keys (an API
token, a password): unless asked (``with_env``; the CLI's ``--bundle-with-env``), each
value is replaced by ``<redacted: env NAME>`` wherever it appears in any member (the
spec, the logs, the stacks), and ``contents.json`` names the variables redacted. Values
shorter than :data:`REDACT_MIN_CHARS` are left (they would match everywhere, and a
secret is longer).

Only what exists is packed: a job that never hung has no stacks. Every file is read
once, up to a limit (:data:`FILE_MAX_BYTES`; the newest bytes are kept), so a bundle of a
job that ran for days stays small. Building it reads files only: the job goes on.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from pathlib import Path
from typing import IO, Any

from alchemist.errors import AlchemistError
from alchemist.job.jobdir import JobDir

#: Lines kept from the end of each log.
LOG_TAIL_LINES = 200
#: Bytes read from the end of any one file, at most.
FILE_MAX_BYTES = 1 << 20
#: ``--env`` values shorter than this are not redacted (``1``, ``true``, ``en``).
REDACT_MIN_CHARS = 4
#: The bundle's media type (the REST route's ``Content-Type``).
MEDIA_TYPE = "application/gzip"


def bundle_name(job_id: str) -> str:
    """The bundle's file name: ``alchemist-<id>-debug.tar.gz``."""
    return f"alchemist-{job_id}-debug.tar.gz"


def _read_tail(path: Path, limit: int = FILE_MAX_BYTES) -> tuple[bytes, bool] | None:
    """``(the last limit bytes of path, whether it was cut)``, or None if unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            data = f.read(limit)
    except OSError:
        return None
    return data, size > limit


def _tail_lines(path: Path, lines: int) -> tuple[bytes, bool] | None:
    """The last ``lines`` lines of ``path`` (read from its last :data:`FILE_MAX_BYTES`),
    and whether anything was left out."""
    found = _read_tail(path)
    if found is None:
        return None
    data, cut = found
    parts = data.splitlines(keepends=True)
    if cut and parts:
        parts = parts[1:]  # the read began inside a line
    kept = parts[-lines:] if lines > 0 else []
    return b"".join(kept), cut or len(parts) > len(kept)


def _members(job_dir: JobDir) -> list[tuple[str, Path, str]]:
    """``(name in the bundle, file, how to read it: "whole" or "tail")`` of every file
    that belongs in the bundle and exists now."""
    out: list[tuple[str, Path, str]] = [
        ("spec.json", job_dir.spec, "whole"),
        ("state.json", job_dir.state, "whole"),
        ("source.py", job_dir.bundle / "source.py", "whole"),
    ]
    debug = job_dir.debug
    try:
        names = sorted(p.name for p in debug.iterdir() if p.is_file())
    except OSError:
        names = []
    # stacks-/watchdog-rank-<r>.txt, recorder-rank-<r>.json, hooks-rank-<r>.json; not the
    # request files (they live in requests/) nor a responder's half-written answer
    out.extend(
        (f"debug/{name}", debug / name, "whole")
        for name in names
        if not name.startswith(".") and name.endswith((".txt", ".json"))
    )
    out.extend(
        (f"logs/rank-{rank}.log", job_dir.rank_log(rank), "tail")
        for rank in job_dir.ranks_with_logs()
    )
    out.append(("logs/launcher.log", job_dir.launcher_log, "tail"))
    return [(name, path, how) for name, path, how in out if path.is_file()]


def report_stacks(entry: dict[str, Any]) -> str | None:
    """The stacks of one rank of a report (an entry of ``report["ranks"]``) as text, in
    faulthandler's format under a line saying where they came from; None: no stacks."""
    threads = entry.get("threads") or []
    if not threads:
        return None
    when = entry.get("stacks_time")
    said = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)) if when else "?"
    main = next((t["id"] for t in threads if t.get("main")), None)
    lines = [
        f"Rank {entry['rank']}: stacks from {entry.get('stacks_from')} at {said}"
        + (f"; main thread {main}" if main else "")
    ]
    for thread in threads:
        if thread.get("id"):
            lines.append(f"Thread {thread['id']} (most recent call first):")
        else:
            lines.append("Stack (most recent call first):")
        lines.extend(
            f'  File "{f["file"]}", line {f["line"]} in {f["function"]}'
            for f in thread.get("frames", [])
        )
        lines.append("")
    return "\n".join(lines) + "\n"


def env_values(job_dir: JobDir) -> dict[str, str]:
    """The job's ``--env`` values (from its ``spec.json``) long enough to redact."""
    try:
        env = json.loads(job_dir.spec.read_text()).get("env") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    return {
        str(k): str(v) for k, v in env.items() if isinstance(v, str) and len(v) >= REDACT_MIN_CHARS
    }


def redact(data: bytes, secrets: dict[str, str]) -> bytes:
    """``data`` with each value of ``secrets`` replaced by ``<redacted: env NAME>`` (the
    longest first, so a value that contains another is replaced whole); the same in
    its JSON-escaped form, as a value in a JSON member is written."""
    for name, value in sorted(secrets.items(), key=lambda kv: -len(kv[1])):
        mark = f"<redacted: env {name}>".encode()
        for form in {value.encode(), json.dumps(value)[1:-1].encode()}:
            data = data.replace(form, mark)
    return data


def _add(tar: tarfile.TarFile, name: str, data: bytes, when: float) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(when)
    info.mode = 0o600  # a job's files are its owner's alone (alchemist.job.jobdir)
    tar.addfile(info, io.BytesIO(data))


def write_bundle(
    job_dir: JobDir,
    report: dict[str, Any],
    target: Path | IO[bytes],
    *,
    log_lines: int = LOG_TAIL_LINES,
    with_env: bool = False,
) -> list[str]:
    """Write the debug bundle of the job in ``job_dir`` (see the module) to ``target``.

    Args:
        job_dir: the job's directory.
        report: the job's diagnosis report, packed as ``report.json``.
        target: a file path (written whole, replaced if it exists) or a binary stream.
        log_lines: lines kept from the end of each log.
        with_env: keep the job's ``--env`` values (redacted by default).

    Returns:
        The names of the members, relative to the bundle's folder.

    Raises:
        OSError: ``target`` cannot be written.
    """
    job_id = str(report.get("job_id") or job_dir.job_id)
    top = bundle_name(job_id).removesuffix(".tar.gz")
    now = time.time()
    contents: list[dict[str, Any]] = []
    packed: list[tuple[str, bytes, float]] = [
        ("report.json", json.dumps(report, indent=2).encode(), now)
    ]
    contents.append({"name": "report.json", "from": "the diagnosis", "cut": False})
    for ranked in report.get("ranks", []):
        text = report_stacks(ranked)
        if text is not None:
            name = f"stacks/rank-{ranked['rank']}.txt"
            packed.append((name, text.encode(), ranked.get("stacks_time") or now))
            contents.append({"name": name, "from": "the diagnosis", "cut": False})
    for name, path, how in _members(job_dir):
        found = _tail_lines(path, log_lines) if how == "tail" else _read_tail(path)
        if found is None:
            continue  # removed meanwhile (a marker at the rank's exit)
        data, cut = found
        try:
            when = path.stat().st_mtime
        except OSError:
            when = now
        packed.append((name, data, when))
        entry: dict[str, Any] = {"name": name, "from": str(path), "cut": cut}
        if how == "tail":
            entry["last_lines"] = log_lines
        contents.append(entry)
    secrets = {} if with_env else env_values(job_dir)
    packed = [(name, redact(data, secrets), when) for name, data, when in packed]
    listing = {
        "job_id": job_id,
        "created": now,
        "job_dir": str(job_dir.root),
        "files": contents,
        "redacted_env": sorted(secrets),
    }
    packed.append(("contents.json", json.dumps(listing, indent=2).encode(), now))

    def pack(stream: IO[bytes]) -> None:
        with tarfile.open(fileobj=stream, mode="w:gz") as tar:
            for name, data, when in packed:
                _add(tar, f"{top}/{name}", data, when)

    if isinstance(target, Path):
        with open(target, "wb") as f:
            pack(f)
    else:
        pack(target)
    return [name for name, _, _ in packed]


def bundle_bytes(
    job_dir: JobDir, report: dict[str, Any], *, log_lines: int = LOG_TAIL_LINES
) -> bytes:
    """The debug bundle (:func:`write_bundle`) as bytes (what the REST route sends: the
    ``--env`` values redacted; their owner reads them in the job's spec)."""
    buffer = io.BytesIO()
    write_bundle(job_dir, report, buffer, log_lines=log_lines)
    return buffer.getvalue()


def save_bundle(
    job_dir: JobDir, report: dict[str, Any], path: Path, *, with_env: bool = False
) -> Path:
    """Write the bundle to ``path`` (inside it, named :func:`bundle_name`, when it is a
    folder) and return where it went; what the CLI's and the magic's ``--bundle`` do.

    Raises:
        AlchemistError: the file cannot be written (one line: which file, and why).
    """
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / bundle_name(str(report.get("job_id") or job_dir.job_id))
    if not path.parent.is_dir():
        raise AlchemistError(f"cannot write the debug bundle to {path}: {path.parent} is no folder")
    try:
        write_bundle(job_dir, report, path, with_env=with_env)
    except OSError as e:
        raise AlchemistError(
            f"cannot write the debug bundle to {path}: {e.strerror or e}"
        ) from None
    return path
