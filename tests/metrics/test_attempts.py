"""After a restart the curves show each redone step once, with the newest attempt's
value (they drew both attempts over each other: a zig-zag); the raw files keep all."""

from __future__ import annotations

from pathlib import Path

import pytest

from alchemist import client
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobState
from alchemist.metrics.attempts import surviving
from alchemist.metrics.reader import MetricsReader
from alchemist.metrics.reporter import Reporter
from alchemist.metrics.tbwriter import catch_up
from alchemist.widgets.monitor import MonitorData

from .test_tbwriter import scalars


def _log_two_attempts(jd: JobDir, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attempt 0 logs steps 0-7 of both ranks; attempt 1 resumes at step 5, to 9."""
    for attempt, steps in ((0, range(8)), (1, range(5, 10))):
        monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(attempt))
        for rank in (0, 1):
            r = Reporter(jd, rank=rank, tensorboard=False)
            for step in steps:
                r.log(step, loss=100.0 * attempt + step + rank / 10)
            r.close()


def test_surviving_keeps_each_ranks_newest_attempt_per_step() -> None:
    def ev(rank: int, attempt: int, step: int) -> dict:
        return {"rank": rank, "attempt": attempt, "step": step, "values": {}}

    events = [ev(0, 0, s) for s in range(4)] + [ev(1, 0, s) for s in range(4)]
    events += [ev(0, 1, s) for s in range(2, 5)]
    kept = [(e["rank"], e["attempt"], e["step"]) for e in surviving(events)]
    assert kept == [(0, 0, 0), (0, 0, 1)] + [(1, 0, s) for s in range(4)] + [
        (0, 1, s) for s in range(2, 5)
    ]
    # Events written before attempts existed count as attempt 0.
    assert surviving([{"rank": 0, "step": 1, "values": {}}]) == [
        {"rank": 0, "step": 1, "values": {}}
    ]


def test_monitor_and_tensorboard_show_the_newest_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jd = JobDir(tmp_path / "j-restarted").create()
    _log_two_attempts(jd, monkeypatch)
    raw = MetricsReader(jd).read_all()
    assert len(raw) == 2 * (8 + 5), "the raw files keep every attempt's events"
    assert {e["attempt"] for e in raw} == {0, 1}

    class FakeJob:  # what the monitor reads of a job: its directory and its summary
        job_dir = jd

        def to_dict(self) -> dict:
            return {"state": "running", "world_size": 2}

        def status(self) -> object:
            raise AssertionError("not asked: the summary says running")

    data = MonitorData(FakeJob())  # type: ignore[arg-type]
    data._add_events(raw[:8] + raw[13:21], _changes())  # attempt 0 of both ranks
    data._add_events(raw[8:13] + raw[21:], _changes())  # then attempt 1, as it arrives
    for rank in (0, 1):
        series = data.series[("loss", rank)]
        assert series.x.tolist() == list(range(10))
        expected = [s + rank / 10 for s in range(5)] + [100 + s + rank / 10 for s in range(5, 10)]
        assert series.y.tolist() == pytest.approx(expected)

    assert catch_up(jd.root)
    for run, rank in ((jd.tensorboard, 0), (jd.tensorboard / "rank-1", 1)):
        got = scalars(run, "loss")
        assert [s for s, _ in got] == list(range(10))
        assert got[-1][1] == pytest.approx(109 + rank / 10)


def _changes() -> object:
    from alchemist.widgets.monitor import Changes

    return Changes()


RESTARTING = """
import alchemist
first = alchemist.restart_count() == 0
for step in range(0 if first else 5, 8 if first else 10):
    alchemist.log(step, loss=float(step) + (0 if first else 100))
if first:
    raise RuntimeError("attempt 0 dies after step 7; attempt 1 resumes from step 5")
"""


def test_a_real_restarted_job_draws_each_step_once() -> None:
    job = client.submit(RESTARTING, namespace={}, workers=2, max_restarts=1)
    status = job.wait(timeout=240)
    assert status.state == JobState.SUCCEEDED, job.logs()
    assert status.restarts == 1
    data = MonitorData(job)
    data.poll(force_status=True)
    for rank in (0, 1):
        series = data.series[("loss", rank)]
        assert series.x.tolist() == list(range(10))
        assert series.y.tolist() == [0, 1, 2, 3, 4, 105, 106, 107, 108, 109]
