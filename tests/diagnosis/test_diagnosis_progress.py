"""Stall detection from the ranks' progress (alchemist.diagnosis.progress).

Real parts: the metrics files are written by the real reporter of alchemist.metrics
(``Reporter.log``) into a real job directory, and read back from their tails. The
clock is passed in (``now``), so no test sleeps.
"""

from __future__ import annotations

from pathlib import Path

from alchemist.diagnosis import progress
from alchemist.diagnosis.progress import RankProgress, assess, format_ranks
from alchemist.job.jobdir import JobDir
from alchemist.metrics.reporter import Reporter


def test_format_ranks_compresses_runs() -> None:
    assert format_ranks([3]) == "rank 3"
    assert format_ranks([0, 1, 2, 4, 6, 7]) == "ranks 0–2, 4, 6–7"
    assert format_ranks([5, 1]) == "ranks 1, 5"


def test_the_threshold_is_30_s_or_ten_median_step_times() -> None:
    fast = {0: RankProgress(0, 10, 100.0, (0.1, 0.1, 0.2))}
    slow = {0: RankProgress(0, 10, 100.0, (5.0, 6.0, 7.0))}
    assert progress.threshold(fast) == 30.0
    assert progress.threshold(slow) == 60.0
    assert progress.threshold(fast, floor=1.0) == 1.0


def test_a_job_whose_ranks_advance_is_not_stalled() -> None:
    ranks = {r: RankProgress(r, 1200, 1000.0, (1.0,)) for r in (0, 1)}
    stall = assess(ranks, 2, now=1005.0)
    assert stall is not None and not stall.stalled
    assert stall.laggards == []


def test_a_stall_names_the_laggard_and_the_others_step() -> None:
    ranks = {
        0: RankProgress(0, 1200, 1000.0, (1.0,)),
        1: RankProgress(1, 1199, 999.0, (1.0,)),
    }
    stall = assess(ranks, 2, now=1040.0)
    assert stall is not None and stall.stalled
    assert stall.laggards == [1]
    assert stall.note == (
        "no rank advanced for 40 s (threshold 30 s): rank 1 at step 1199 (41 s ago); rank 0 at 1200"
    )


def test_many_ranks_are_grouped_in_the_note() -> None:
    ranks = {r: RankProgress(r, 1200, 1000.0, (1.0,)) for r in range(8)}
    ranks[3] = RankProgress(3, 1199, 999.0, (1.0,))
    stall = assess(ranks, 8, now=1041.0)
    assert stall is not None and stall.stalled
    assert "rank 3 at step 1199 (42 s ago); ranks 0–2, 4–7 at 1200" in stall.note


def test_a_rank_that_never_logged_is_the_laggard() -> None:
    ranks = {0: RankProgress(0, 50, 1000.0, (1.0,))}
    stall = assess(ranks, 2, now=1100.0)
    assert stall is not None and stall.stalled and stall.laggards == [1]
    assert "rank 1 logged no step yet; rank 0 at step 50" in stall.note


def test_no_events_means_no_verdict() -> None:
    assert assess({}, 2, now=1.0) is None


def test_progress_is_read_from_the_reporters_files(tmp_path: Path) -> None:
    job_dir = JobDir(tmp_path / "j1").create()
    for rank, steps in ((0, 5), (1, 3)):
        reporter = Reporter(job_dir, "j1", rank, tensorboard=False)
        for step in range(steps):
            reporter.log(step, loss=1.0 / (step + 1))
        reporter.close()
    read = progress.read_progress(job_dir)
    assert {r: p.step for r, p in read.items()} == {0: 4, 1: 2}
    assert len(read[0].intervals) == 4 and all(i >= 0 for i in read[0].intervals)
    last = max(p.time for p in read.values())
    stall = progress.stall_of(job_dir, 2, now=last + 31)
    assert stall is not None and stall.stalled and stall.laggards == [1]
    assert "rank 1 at step 2" in stall.note and "rank 0 at 4" in stall.note


def test_only_the_newest_attempt_counts(tmp_path: Path) -> None:
    events = [
        {"rank": 0, "attempt": 0, "step": 900, "time": 10.0, "values": {}},
        {"rank": 0, "attempt": 1, "step": 3, "time": 20.0, "values": {}},
        {"rank": 0, "attempt": 1, "step": 4, "time": 21.0, "values": {}},
    ]
    read = progress.from_events(events)
    assert read[0].step == 4 and read[0].intervals == (1.0,)
