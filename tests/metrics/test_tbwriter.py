"""TensorBoard event files written by rank 0's writer process, read back by TensorBoard."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from alchemist.job.jobdir import JobDir
from alchemist.metrics.reporter import Reporter
from alchemist.metrics.tbwriter import catch_up


def scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of ``tag`` in one run, read with TensorBoard's own loader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not run_dir.is_dir():
        return []
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        return []
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_rank0_writer_converts_every_rank(tmp_path: Path) -> None:
    jd = JobDir(tmp_path / "j-tb").create()
    r0 = Reporter(jd, rank=0, tb_flush_secs=0.2)
    r1 = Reporter(jd, rank=1)
    assert r0._tb is None, "no writer before rank 0 has logged (start-up needs the CPU)"
    r0.log(0, total_steps=30)
    for i in range(30):
        r0.log(i, loss=1.0 / (i + 1))
        r1.log(i, loss=2.0 / (i + 1), lr=0.5)
    r0.flush()
    assert r0._tb is not None and r1._tb is None, "one writer per job, started by rank 0"
    r1.close()
    # While the job runs, scalars appear within about a second, without closing.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(scalars(jd.tensorboard, "loss")) < 30:
        time.sleep(0.2)
    assert len(scalars(jd.tensorboard, "loss")) == 30
    r0.close()
    assert r0._tb is None
    got0 = scalars(jd.tensorboard, "loss")
    assert [s for s, _ in got0] == list(range(30))
    assert [v for _, v in got0] == pytest.approx([1.0 / (i + 1) for i in range(30)], rel=1e-6)
    got1 = scalars(jd.tensorboard / "rank-1", "lr")
    assert got1 == [(i, 0.5) for i in range(30)]
    assert scalars(jd.tensorboard, "total_steps") == [], "meta values are not curves"


def test_a_job_that_logs_nothing_starts_no_writer(tmp_path: Path) -> None:
    jd = JobDir(tmp_path / "j-quiet").create()
    with Reporter(jd, rank=0, tb_flush_secs=0.2) as r0:
        r0.flush()
        assert r0._tb is None
    assert not (jd.logs / "tensorboard-writer.log").exists()


def test_catch_up_converts_late_events_once(tmp_path: Path) -> None:
    jd = JobDir(tmp_path / "j-late").create()
    with Reporter(jd, rank=0, tb_flush_secs=0.2) as r0:
        r0.log(0, loss=1.0)
    with Reporter(jd, rank=1) as r1:  # logs after rank 0's writer is gone
        r1.log(0, loss=5.0)
        r1.log(1, loss=4.0)
    assert scalars(jd.tensorboard / "rank-1", "loss") == []
    assert catch_up(jd.root)
    assert catch_up(jd.root)  # nothing new: converts nothing twice
    assert scalars(jd.tensorboard / "rank-1", "loss") == [(0, 5.0), (1, 4.0)]
    assert scalars(jd.tensorboard, "loss") == [(0, 1.0)]


def test_catch_up_goes_on_from_a_cursor_of_an_earlier_version(tmp_path: Path) -> None:
    """Earlier versions kept one shared ``metrics.jsonl`` and an integer ``.cursor``."""
    import json

    jd = JobDir(tmp_path / "j-old").create()
    lines = [
        json.dumps({"rank": r, "step": s, "time": 1.0, "values": {"loss": float(s)}}) + "\n"
        for s in range(4)
        for r in (0, 1)
    ]
    jd.shared_metrics().write_text("".join(lines))
    converted = "".join(lines[:4])  # steps 0 and 1 were converted by the old writer
    (jd.tensorboard / ".cursor").write_text(str(len(converted.encode())))
    assert catch_up(jd.root)
    assert scalars(jd.tensorboard, "loss") == [(2, 2.0), (3, 3.0)]
    assert scalars(jd.tensorboard / "rank-1", "loss") == [(2, 2.0), (3, 3.0)]


def test_catch_up_keeps_to_its_budget_and_a_detached_drain_converts_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job whose writer fell far behind (here: 12 MB of events no writer converted):
    opening TensorBoard converts one chunk at a time, for its budget only, in the
    caller's process; a detached ``--drain`` process converts the rest."""
    from alchemist.metrics import tbwriter
    from alchemist.metrics.reader import parse_cursor

    monkeypatch.setattr(tbwriter, "CHUNK_BYTES", 1 << 20)
    jd = JobDir(tmp_path / "j-behind").create()
    steps = 120_000
    line = '{{"rank": 0, "step": {s}, "time": 1.0, "values": {{"loss": {s}.0, "pad": 0.0}}}}\n'
    jd.rank_metrics(0).write_text("".join(line.format(s=s) for s in range(steps)))
    assert jd.rank_metrics(0).stat().st_size > 8 << 20

    t0 = time.monotonic()
    assert catch_up(jd.root, budget_s=0.0)  # one chunk, then the drain
    assert time.monotonic() - t0 < 10
    deadline = time.monotonic() + 120
    while True:  # the drain holds the writer's lock until it is done
        cursor = (jd.tensorboard / tbwriter.CURSOR_FILE).read_text()
        done = parse_cursor(cursor).get("0") == jd.rank_metrics(0).stat().st_size
        if done and catch_up(jd.root, budget_s=0.0):
            break
        assert time.monotonic() < deadline, "the drain did not convert the rest"
        time.sleep(0.1)
    got = scalars(jd.tensorboard, "loss")
    assert len(got) == steps and got[-1] == (steps - 1, float(steps - 1))


_WORKER = r"""
import sys, time
from pathlib import Path
from alchemist.job.jobdir import JobDir
from alchemist.metrics.reporter import Reporter
rep = Reporter(JobDir(Path(sys.argv[1])), rank=0, tb_flush_secs=0.2)
for i in range(5):
    rep.log(i, loss=float(i))
rep.flush()  # in the file; pending events of a killed worker (< 20 ms) would be lost
print(rep._tb.pid, flush=True)
time.sleep(300)
"""


def test_writer_exits_when_its_worker_is_killed(tmp_path: Path) -> None:
    jd = JobDir(tmp_path / "j-kill").create()
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER, str(jd.root)], stdout=subprocess.PIPE, text=True
    )
    writer = None
    try:
        assert worker.stdout is not None
        writer = psutil.Process(int(worker.stdout.readline()))
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        writer.wait(timeout=30)  # raises TimeoutExpired if it stayed behind
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        if writer is not None and writer.is_running():
            writer.kill()
    # What was written before the kill reached TensorBoard.
    assert [s for s, _ in scalars(jd.tensorboard, "loss")] == [0, 1, 2, 3, 4]
