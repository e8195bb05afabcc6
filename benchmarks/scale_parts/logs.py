"""Tail and follow of one rank log at 1 MB .. 1 GB.

The job is a real one (``client.submit`` of a tiny cell on the local backend, run to
its end); its rank-0 log is then grown to each size with 80-byte lines, in big blocks.
Measured, in this process on a ``client.Job``: ``job.log_tail(0, 100)`` (the last 100
lines, read from the end) and following (a line appended, then ``job.log_chunk`` from
the cursor the tail gave: what ``LogFollower`` and the monitor do on each poll); and
over real HTTP from a real Jupyter server with Alchemist's extension,
``GET /jobs/<id>/logs?rank=0&tail=100``. Target: constant time (exponent ~ 0), p95 <=
50 ms at 1 GB.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from scale_parts.common import Series, pct

TARGET_S = 0.050
LINE = 80


def _grow(path: Path, start: int, stop: int) -> None:
    """Append whole lines until the file has about ``stop`` bytes."""
    pad = "x" * (LINE - 30)
    with open(path, "ab") as f:
        n = start // LINE
        while n * LINE < stop:
            block = range(n, min(n + 100_000, stop // LINE + 1))
            f.write(
                "".join(
                    f"step {i:012d} loss 0.5 {pad}\n"[: LINE - 1] + "\n" for i in block
                ).encode()
            )
            n = block.stop


def run(smoke: bool) -> list[Series]:
    from alchemist import client
    from alchemist.job.spec import JobState
    from scale_parts.index import _get, jupyter_server

    sizes = [100_000, 1_000_000] if smoke else [1_000_000, 10_000_000, 100_000_000, 1_000_000_000]
    repeat = 5 if smoke else 30
    target = f"p95 <= {TARGET_S * 1000:.0f} ms at {sizes[-1]:.0e}, exponent ~ 0"
    tail = Series("Job.log_tail(rank, 100)", "bytes", target=target)
    follow = Series(
        "follow: one new line (log_chunk from the tail's cursor)", "bytes", target=target
    )
    rest = Series("GET /jobs/<id>/logs?tail=100", "bytes", target=target)

    job = client.submit("x = 1", workers=1, name="logs-scale")
    status = job.wait(timeout=300)
    if status.state != JobState.SUCCEEDED:
        raise RuntimeError(f"the tiny job did not succeed: {status.reason}\n{job.logs()}")
    path = job.job_dir.rank_log(0)
    path.write_bytes(b"")
    made = 0
    with jupyter_server(Path(tempfile.mkdtemp(prefix="scale-logs-nb-"))) as (base, token):
        _get(base, token, f"jobs/{job.id}/logs?rank=0&tail=1")  # the server's first imports
        for size in sizes:
            _grow(path, made, size)
            made = path.stat().st_size
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                chunk = job.log_tail(0, 100)
                times.append(time.perf_counter() - start)
            assert len(chunk.lines) == 100 and chunk.cursor == path.stat().st_size
            tail.add(size, pct(times, 95))

            times = []
            cursor = chunk.cursor
            with open(path, "ab") as f:
                for i in range(repeat):
                    f.write(f"new line {i}\n".encode())
                    f.flush()
                    start = time.perf_counter()
                    got = job.log_chunk(0, cursor)
                    times.append(time.perf_counter() - start)
                    assert got.lines == [f"new line {i}"], got.lines
                    cursor = got.cursor
            follow.add(size, pct(times, 95))

            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                body = _get(base, token, f"jobs/{job.id}/logs?rank=0&tail=100")
                times.append(time.perf_counter() - start)
            assert len(body["lines"]) == 100  # type: ignore[arg-type]
            rest.add(size, pct(times, 95))
    for s in (tail, follow, rest):
        s.met = s.values[-1] <= TARGET_S and (s.exponent or 0) < 0.25
    rest.notes.append("real HTTP, real Jupyter server with the extension")
    follow.notes.append("the cursor stays at the end: each poll reads only the new bytes")
    return [tail, follow, rest]
