"""The first view of a job's metrics at 1e4 .. 1e7 events: the monitor attaching, and
``GET /jobs/<id>/metrics?view=summary``.

The job is a real one (``client.submit`` of a tiny cell on the local backend, run to
its end); its rank-0 metrics file is then grown to each size with events written in
the reporter's exact line format (two curves, ``loss`` and ``lr``, plus
``total_steps``), in big blocks. While a job runs, rank 0's TensorBoard writer process
keeps each file's summary current (``alchemist.metrics.summary.SummaryKeeper``, saved
every 2 s); here one keeper folds each block as it is written (its cost is reported),
and the summary is then left 2,000 events behind the file (2 s of a 1 kHz logger), as
the writer leaves it between saves. That state is restored before every measured view.

Measured: ``JobMonitor(job).widget`` (the constructor's first update and the bqplot
figures built from it: the first render, whose curves hold the whole history,
downsampled; checked: its point count is the history's), and over real HTTP from a real
Jupyter server with Alchemist's extension, ``GET /jobs/<id>/metrics?view=summary``.
Target: the first curve within 1 s (p95) at 1e7 events, exponent ~ 0. Also reported:
the same route with no summary at all (its first, bounded fold of 8 MB: a partial
view; the rest comes with the next calls) and the keeper's whole-history fold cost.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from scale_parts.common import Series, pct

TARGET_S = 1.0
LAG_EVENTS = 2_000
BLOCK = 200_000


def _lines(job_id: str, start: int, stop: int) -> bytes:
    """Events ``start..stop-1`` as the reporter writes them (``Reporter._encode``)."""
    steps = np.arange(start, stop)
    loss = (np.exp(-steps / 3e6) + 0.05 * np.sin(steps / 977.0)).tolist()
    prefix = f'{{"job_id":{json.dumps(job_id)},"rank":0,"attempt":0,"step":'
    out = [
        f'{prefix}{s},"time":{1.7e9 + s * 0.01!r},"values":{{"loss":{v!r},"lr":0.001}}}}\n'
        for s, v in zip(steps.tolist(), loss, strict=True)
    ]
    if start == 0:
        out[0] = (
            f'{prefix}0,"time":1700000000.0,"values":{{"total_steps":1e7,"batch_size":32.0,'
            f'"loss":{loss[0]!r},"lr":0.001}}}}\n'
        )
    return "".join(out).encode()


def _grow(path: Path, job_id: str, start: int, stop: int, keeper: Any) -> float:
    """Append events ``start..stop-1``; the keeper's fold time (seconds)."""
    folded = 0.0
    with open(path, "ab") as f:
        for lo in range(start, stop, BLOCK):
            f.write(_lines(job_id, lo, min(stop, lo + BLOCK)))
            f.flush()
            if keeper is not None:
                t0 = time.perf_counter()
                keeper.refresh(force_save=True)
                folded += time.perf_counter() - t0
    return folded


def _get(base: str, token: str, path: str) -> tuple[dict[str, Any], int]:
    req = urllib.request.Request(f"{base}/{path}", headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=120) as r:
        body = r.read()
    return json.loads(body), len(body)


def run(smoke: bool) -> list[Series]:
    import tempfile

    from alchemist import client
    from alchemist.job.spec import JobState
    from alchemist.metrics import summary as summaries
    from alchemist.metrics.reader import MetricsReader
    from alchemist.widgets.monitor import JobMonitor
    from scale_parts.index import jupyter_server

    sizes = [100, 1_000] if smoke else [10_000, 100_000, 1_000_000, 10_000_000]
    repeat = 3 if smoke else 7
    target = f"p95 <= {TARGET_S * 1000:.0f} ms at {sizes[-1]:.0e}, exponent ~ 0"
    monitor = Series("monitor attach: first render, whole history", "events", target=target)
    rest = Series("GET /jobs/<id>/metrics?view=summary", "events", target=target)
    cold = Series("GET ?view=summary, no summary yet (partial first view)", "events")
    upkeep = Series("summary upkeep: folding the whole history (writer process)", "events")
    reply_size = Series("?view=summary reply size", "events", value_unit="bytes")

    job = client.submit("x = 1", workers=1, name="metrics-scale")
    status = job.wait(timeout=300)
    if status.state != JobState.SUCCEEDED:
        raise RuntimeError(f"the tiny job did not succeed: {status.reason}\n{job.logs()}")
    import bqplot  # noqa: F401  (imported once, as a kernel that showed a monitor has)

    path = job.job_dir.rank_metrics(0)
    path.unlink(missing_ok=True)
    cache = summaries.summary_path(path)
    keeper = summaries.SummaryKeeper(MetricsReader(job.job_dir), save_every=0.0)
    made, fold_total = 0, 0.0
    notes: list[str] = []
    with jupyter_server(Path(tempfile.mkdtemp(prefix="scale-metrics-nb-"))) as (base, token):
        _get(base, token, f"jobs/{job.id}/metrics?view=summary")  # the server's first imports
        for size in sizes:
            t0 = time.perf_counter()
            behind = max(made, size - LAG_EVENTS)
            fold_total += _grow(path, job.id, made, behind, keeper)
            keeper.refresh(force_save=True)
            _grow(path, job.id, behind, size, None)  # written since the writer's last save
            made = size
            built = time.perf_counter() - t0
            saved = cache.read_bytes()
            upkeep.add(size, fold_total)

            def restore(saved: bytes = saved) -> None:
                cache.write_bytes(saved)  # the summary as the writer left it

            times = []
            for _ in range(repeat):
                restore()
                start = time.perf_counter()
                m = JobMonitor(job)
                m.widget  # noqa: B018  (builds the figures from the first update)
                times.append(time.perf_counter() - start)
                assert m.data.points("loss", 0) == size, (m.data.points("loss", 0), size)
                assert m.data.series[("loss", 0)].view()[0][-1] == size - 1
                m.stop()
            monitor.add(size, pct(times, 95))

            times = []
            for _ in range(repeat):
                restore()
                start = time.perf_counter()
                body, nbytes = _get(base, token, f"jobs/{job.id}/metrics?view=summary")
                times.append(time.perf_counter() - start)
                loss = next(s for s in body["series"] if s["metric"] == "loss")
                assert loss["count"] == size and loss["steps"][-1] == size - 1 and body["complete"]
            rest.add(size, pct(times, 95))
            reply_size.add(size, float(nbytes))

            cache.unlink()
            start = time.perf_counter()
            body, _ = _get(base, token, f"jobs/{job.id}/metrics?view=summary")
            cold.add(size, time.perf_counter() - start)
            notes.append(
                f"{size:.0e}: file {path.stat().st_size / 1e6:.0f} MB, written and folded in"
                f" {built:.1f} s;"
                f" cold first view complete={body['complete']}"
            )
            restore()
    monitor.met = monitor.values[-1] <= TARGET_S and (monitor.exponent or 0) < 0.25
    rest.met = rest.values[-1] <= TARGET_S and (rest.exponent or 0) < 0.25
    monitor.notes.append(
        f"JobMonitor(job).widget on a client.Job, summary {LAG_EVENTS} events behind the file;"
        " checked: the curve counts every event and ends at the last step"
    )
    rest.notes.append("real HTTP, real Jupyter server with the extension; default max_points")
    cold.notes.append(
        "no summary: one request folds at most 8 MB (about 6e4 events) and returns what"
        " it has (complete=false) and caches it; asking again goes on"
    )
    upkeep.notes.append(
        "CPU of the keeper (rank 0's TensorBoard writer, niced, off the training process),"
        " summed over the job's life: linear in events, paid once"
    )
    upkeep.notes.extend(notes)
    return [monitor, rest, cold, upkeep, reply_size]
