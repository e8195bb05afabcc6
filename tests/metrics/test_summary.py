"""The downsampled first view of a long metrics history (alchemist.metrics.summary):
bounded, true to the file (first and last step, every extreme), continued exactly by the
cursor it gives, and never trusted when stale or damaged."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from alchemist.backends.api import LogChunk
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobState, JobStatus
from alchemist.metrics import summary as summaries
from alchemist.metrics.attempts import surviving
from alchemist.metrics.reader import MetricsReader
from alchemist.metrics.tail import read_lines


def event(rank: int, step: int, attempt: int = 0, **values: float) -> str:
    return (
        json.dumps(
            {
                "job_id": "j",
                "rank": rank,
                "attempt": attempt,
                "step": step,
                "time": 1e9 + step,
                "values": values,
            }
        )
        + "\n"
    )


def write(job_dir: JobDir, rank: int, lines: list[str]) -> None:
    job_dir.metrics_dir.mkdir(parents=True, exist_ok=True)
    with open(job_dir.rank_metrics(rank), "a") as f:
        f.write("".join(lines))


def noisy(rank: int, steps: range, seed: int = 0) -> list[str]:
    rng = random.Random(seed + rank)
    return [
        event(rank, s, loss=math.exp(-s / 3000) + rng.random(), acc=rng.random()) for s in steps
    ]


@pytest.fixture
def job_dir(tmp_path: Path) -> JobDir:
    return JobDir(tmp_path / "j-1").create()


def truth(job_dir: JobDir) -> dict[tuple[str, int], list[tuple[int, float]]]:
    """Every surviving point of every series, read the slow way."""
    out: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for e in surviving(MetricsReader(job_dir).read_all()):
        for name, v in e["values"].items():
            out.setdefault((name, e["rank"]), []).append((e["step"], v))
    return out


def assert_faithful(job_dir: JobDir, max_points: int = 400) -> Any:
    ov = MetricsReader(job_dir).overview(max_points)
    want = truth(job_dir)
    assert set(ov.series) == set(want)
    for key, points in want.items():
        s = ov.series[key]
        assert len(s.steps) <= max_points + 8
        assert s.steps[0] == points[0][0] and s.steps[-1] == points[-1][0], key
        values = [v for _, v in points if not math.isnan(v)]
        assert min(s.values) == min(values) and max(s.values) == max(values), key
        assert set(zip(s.steps, s.values, strict=True)) <= set(points), "only real points"
        assert s.logged == len(points)
    return ov


def test_overview_keeps_first_last_and_extremes_of_every_series(job_dir: JobDir) -> None:
    lines = noisy(0, range(20_000))
    lines[7_777] = event(0, 7_777, loss=50.0, acc=-3.0)  # spikes the eye must see
    write(job_dir, 0, lines)
    write(job_dir, 1, noisy(1, range(5_000)))
    ov = assert_faithful(job_dir)
    assert 7_777.0 in ov.series[("loss", 0)].steps
    assert ov.metrics == ["loss", "acc"]
    assert ov.progress[0]["step"] == 19_999 and ov.progress[0]["events"] == 20_000
    assert ov.progress[1]["step"] == 4_999 and len(ov.progress[1]["recent"]) == 20
    assert ov.complete


def test_the_first_view_is_bounded_however_long_the_history(job_dir: JobDir) -> None:
    write(job_dir, 0, noisy(0, range(10_000)))
    small = MetricsReader(job_dir).overview(300)
    cache = summaries.summary_path(job_dir.rank_metrics(0))
    size_small = cache.stat().st_size
    write(job_dir, 0, noisy(0, range(10_000, 80_000)))
    big = MetricsReader(job_dir).overview(300)
    assert len(big.series[("loss", 0)].steps) <= 308
    assert len(small.series[("loss", 0)].steps) <= 308
    assert big.series[("loss", 0)].logged == 80_000
    # 8x the history, not 8x the summary
    assert cache.stat().st_size < 1.3 * size_small
    cached = summaries.load(job_dir.rank_metrics(0))
    assert cached is not None
    for s in cached.series.values():
        assert len(s.buckets) <= summaries.MAX_BUCKETS


def test_many_metric_keys_share_a_bounded_budget(job_dir: JobDir) -> None:
    lines = [event(0, s, **{f"m{k}": float((s * k) % 101) for k in range(200)}) for s in range(600)]
    write(job_dir, 0, lines)
    MetricsReader(job_dir).overview()
    cached = summaries.load(job_dir.rank_metrics(0))
    assert cached is not None and len(cached.series) == 200
    stored = sum(len(s.buckets) for s in cached.series.values())
    assert stored * 5 <= summaries.POINT_BUDGET
    assert all(len(s.buckets) <= summaries._cap(200) for s in cached.series.values())
    assert_faithful(job_dir)


def test_reading_on_from_the_cursor_misses_no_event_and_repeats_none(job_dir: JobDir) -> None:
    write(job_dir, 0, noisy(0, range(3_000)))
    # a half-written last line: not in the overview, read whole later
    with open(job_dir.rank_metrics(0), "a") as f:
        f.write(event(0, 3_000, loss=1.0)[:20])
    ov = MetricsReader(job_dir).overview()
    assert ov.progress[0]["step"] == 2_999
    with open(job_dir.rank_metrics(0), "a") as f:
        f.write(event(0, 3_000, loss=1.0)[20:])
    write(job_dir, 0, noisy(0, range(3_001, 3_010)))
    write(job_dir, 2, noisy(2, range(5)))  # a rank whose file appears after the overview
    events, cursor = MetricsReader(job_dir).read(ov.cursor)
    assert [(e["rank"], e["step"]) for e in events] == [(0, s) for s in range(3_000, 3_010)] + [
        (2, s) for s in range(5)
    ]
    assert MetricsReader(job_dir).read(cursor)[0] == []


def test_a_second_view_reads_only_the_bytes_after_the_summary(
    job_dir: JobDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(job_dir, 0, noisy(0, range(5_000)))
    first = MetricsReader(job_dir).overview()
    covered = int(first.cursor.split(":")[1])
    write(job_dir, 0, noisy(0, range(5_000, 5_100)))
    starts: list[int] = []
    original = MetricsReader._read_file

    def spy(self: MetricsReader, path: Path, since: int, budget: int | None) -> Any:
        starts.append(since)
        return original(self, path, since, budget)

    monkeypatch.setattr(MetricsReader, "_read_file", spy)
    second = MetricsReader(job_dir).overview()
    assert starts and min(starts) == covered, "nothing before the summary's offset is read"
    assert second.series[("loss", 0)].logged == 5_100
    assert second.series[("loss", 0)].steps[-1] == 5_099


@pytest.mark.parametrize(
    "damage",
    ["garbage", "flipped byte", "other file's summary", "file truncated", "file rewritten"],
)
def test_a_stale_or_damaged_summary_is_never_trusted(job_dir: JobDir, damage: str) -> None:
    write(job_dir, 0, noisy(0, range(2_000)))
    write(job_dir, 1, noisy(1, range(1_000)))
    MetricsReader(job_dir).overview()
    cache = summaries.summary_path(job_dir.rank_metrics(0))
    metrics = job_dir.rank_metrics(0)
    if damage == "garbage":
        cache.write_bytes(b"not a summary")
    elif damage == "flipped byte":
        data = bytearray(cache.read_bytes())
        data[len(data) // 2] ^= 0x01
        cache.write_bytes(bytes(data))
    elif damage == "other file's summary":
        cache.write_bytes(summaries.summary_path(job_dir.rank_metrics(1)).read_bytes())
    elif damage == "file truncated":
        metrics.write_text("".join(noisy(0, range(100), seed=9)))
    elif damage == "file rewritten":  # as long as before, other events
        metrics.write_text("".join(noisy(0, range(2_000, 4_000), seed=5)))
    assert summaries.load(metrics) is None
    ov = assert_faithful(job_dir)  # rebuilt from the file, not taken from the cache
    assert summaries.load(metrics) is not None, "and cached again"
    assert ov.cursor == MetricsReader(job_dir).read(None)[1]


def test_a_restart_drops_the_superseded_steps_as_the_monitor_does(job_dir: JobDir) -> None:
    lines = noisy(0, range(0, 700))
    lines[650] = event(0, 650, loss=99.0, acc=0.5)  # logged, then redone: not shown
    lines += [event(0, s, attempt=1, loss=0.25, acc=0.5) for s in range(500, 900)]
    write(job_dir, 0, lines)
    ov = assert_faithful(job_dir)
    assert 99.0 not in ov.series[("loss", 0)].values
    assert ov.series[("loss", 0)].logged == 900
    assert ov.attempts == {0: 1}


def test_a_budget_spreads_the_first_pass_over_calls(job_dir: JobDir) -> None:
    write(job_dir, 0, noisy(0, range(4_000)))
    write(job_dir, 1, noisy(1, range(4_000)))
    calls = 0
    while True:
        calls += 1
        ov = MetricsReader(job_dir).overview(max_bytes=100_000)
        if ov.complete:
            break
        assert calls < 50
    assert calls > 3
    assert ov.series[("loss", 0)].logged == 4_000 and ov.series[("loss", 1)].logged == 4_000
    assert_faithful(job_dir)


def test_a_folder_it_cannot_write_costs_a_pass_not_an_error(
    job_dir: JobDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(job_dir, 0, noisy(0, range(500)))

    def refuse(*args: Any, **kwargs: Any) -> Any:  # a read-only job folder (even for root)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(summaries.tempfile, "mkstemp", refuse)
    ov = MetricsReader(job_dir).overview()
    assert ov.series[("loss", 0)].logged == 500 and ov.complete
    assert summaries.load(job_dir.rank_metrics(0)) is None


def test_the_keeper_folds_as_the_file_grows(job_dir: JobDir) -> None:
    keeper = summaries.SummaryKeeper(MetricsReader(job_dir), save_every=0.0)
    write(job_dir, 0, noisy(0, range(1_000)))
    keeper.refresh()
    write(job_dir, 0, noisy(0, range(1_000, 1_500)))
    keeper.refresh()
    cached = summaries.load(job_dir.rank_metrics(0))
    assert cached is not None and cached.offset == job_dir.rank_metrics(0).stat().st_size
    assert cached.series[("loss", 0)].count == 1_500
    assert_faithful(job_dir)


def test_tail_cursor_starts_at_a_line_near_the_end(job_dir: JobDir) -> None:
    reader = MetricsReader(job_dir, system=True)
    path = job_dir.rank_metrics(0, system=True)
    job_dir.metrics_dir.mkdir(exist_ok=True)
    path.write_text("".join(event(0, s, cpu_percent=float(s)) for s in range(1_000)))
    events, _ = reader.read(reader.tail_cursor(1_000))
    assert 5 < len(events) < 20 and events[-1]["step"] == 999
    assert [e["step"] for e in events] == list(range(1_000 - len(events), 1_000))


class FileJob:
    """A finished job that is only its directory (what the monitor reads)."""

    def __init__(self, job_dir: JobDir) -> None:
        self.job_dir = job_dir
        self.id = self.name = job_dir.root.name

    def status(self) -> JobStatus:
        return JobStatus(state=JobState.SUCCEEDED, reason=None)

    def log_chunk(self, rank: int, since: int = 0, limit_bytes: int = 1 << 20) -> LogChunk:
        lines, cursor, more = read_lines(self.job_dir.rank_log(rank), since, limit_bytes)
        return LogChunk(rank=rank, lines=lines, cursor=cursor, truncated=more)

    def cancel(self) -> None:
        pass

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "state": "succeeded", "world_size": 2}


def test_the_monitor_attaches_with_the_whole_history_downsampled(job_dir: JobDir) -> None:
    from alchemist.widgets.monitor import JobMonitor

    lines = noisy(0, range(30_000))
    lines[12_345] = event(0, 12_345, loss=-7.0, acc=0.5)
    write(job_dir, 0, [event(0, 0, total_steps=30_000, batch_size=8), *lines])
    write(job_dir, 1, noisy(1, range(100)))
    m = JobMonitor(FileJob(job_dir), max_points=500)  # the constructor's first update
    curve = m.data.series[("loss", 0)]
    x, y = curve.view()
    assert len(x) <= 510 and x[0] == 0 and x[-1] == 29_999
    assert -7.0 in y.tolist()
    assert m.data.points("loss", 0) == 30_000 and m.data.points("loss", 1) == 100
    assert m.data.progress[0].total_steps == 30_000 and m.data.progress[0].step == 29_999
    assert "30000 points" in repr(m)
    # then every new point, from the overview's cursor
    write(job_dir, 0, [event(0, 30_000, loss=-9.0, acc=0.5)])
    m.update()
    x, y = m.data.series[("loss", 0)].view()
    assert x[-1] == 30_000 and -9.0 in y.tolist()
    assert m.data.points("loss", 0) == 30_001
    assert m.data.finished_reading or (m.update() is not None and m.data.finished_reading)
