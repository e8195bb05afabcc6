"""The metrics pipeline: the reporter's file format and the tailing reader.

Writers here are real: the Reporter in this process, and real subprocesses appending
concurrently (several ranks at once, and a writer that leaves lines half written).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alchemist.jobdir import JobDir
from alchemist.metrics.reader import MetricsReader, events_to_dataframe
from alchemist.metrics.reporter import Reporter, get_reporter, reporter_from_env, set_reporter


def make_job(tmp_path: Path, job_id: str = "j-test") -> JobDir:
    return JobDir(tmp_path / job_id).create()


def test_reporter_writes_event_shape_read_back_by_reader(tmp_path: Path) -> None:
    jd = make_job(tmp_path)
    with Reporter(jd, rank=1, tensorboard=False) as rep:
        rep.log(0, loss=2.5, acc=1)
        rep.log(1, loss=float("nan"), big=float("inf"))
    lines = jd.metrics.read_text().splitlines()
    # Each line is plain JSON, equal to what json.dumps of the event would give.
    first = json.loads(lines[0])
    assert first["job_id"] == "j-test" and first["rank"] == 1 and first["step"] == 0
    assert first["values"] == {"loss": 2.5, "acc": 1.0}
    assert abs(first["time"] - time.time()) < 60
    events, cursor = MetricsReader(jd.metrics).read(0)
    assert cursor == jd.metrics.stat().st_size
    assert [e["step"] for e in events] == [0, 1]
    assert math.isnan(events[1]["values"]["loss"]) and events[1]["values"]["big"] == math.inf


def test_reporter_rejects_non_numbers_with_one_line(tmp_path: Path) -> None:
    with Reporter(make_job(tmp_path), tensorboard=False) as rep:
        with pytest.raises(TypeError, match="'name' must be a number"):
            rep.log(0, name="resnet")
        with pytest.raises(TypeError, match="step must be an integer"):
            rep.log("first", loss=1.0)  # type: ignore[arg-type]


def test_reporter_accepts_tensors_and_numpy(tmp_path: Path) -> None:
    import numpy as np
    import torch

    with Reporter(make_job(tmp_path), tensorboard=False) as rep:
        rep.log(np.int64(3), loss=torch.tensor(0.25), acc=np.float32(0.5))
        assert rep.events()[0]["values"] == {"loss": 0.25, "acc": 0.5}
        assert rep.events()[0]["step"] == 3


def test_memory_mode_is_bounded() -> None:
    rep = Reporter(None, rank=0, memory_limit=100)
    for i in range(250):
        rep.log(i, loss=float(i))
    events = rep.events()
    assert len(events) == 100 and events[0]["step"] == 150 and events[-1]["step"] == 249
    assert rep.path is None


def test_reporter_from_env_and_global(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jd = make_job(tmp_path, "j-env")
    env = {"ALCHEMIST_JOB_DIR": str(jd.root), "ALCHEMIST_JOB_ID": "j-env", "RANK": "3"}
    rep = reporter_from_env(env)
    try:
        assert rep.rank == 3 and rep.job_id == "j-env" and rep.path == jd.metrics
    finally:
        rep.close()
    mem = reporter_from_env({})
    assert mem.path is None
    previous = set_reporter(mem)
    try:
        assert get_reporter() is mem
    finally:
        set_reporter(previous)


def test_cursor_reads_only_new_events_and_restarts(tmp_path: Path) -> None:
    jd = make_job(tmp_path)
    reader = MetricsReader(jd.metrics)
    assert reader.read(0) == ([], 0)  # missing file reads as empty
    with Reporter(jd, tensorboard=False) as rep:
        for i in range(5):
            rep.log(i, loss=float(i))
        rep.flush()
        events, c1 = reader.read(0)
        assert [e["step"] for e in events] == [0, 1, 2, 3, 4]
        assert reader.read(c1) == ([], c1)
        for i in range(5, 8):
            rep.log(i, loss=float(i))
        rep.flush()
        # A new reader (a restarted kernel) resumes from the stored cursor.
        events, c2 = MetricsReader(jd.metrics).read(c1)
        assert [e["step"] for e in events] == [5, 6, 7]
        assert c2 > c1
        # max_bytes splits a read; the pieces add up to the whole.
        pieces: list[int] = []
        cursor = 0
        while cursor < c2:
            part, cursor = reader.read(cursor, max_bytes=150)
            pieces.extend(e["step"] for e in part)
        assert pieces == list(range(8))


def test_events_reach_the_file_without_flush(tmp_path: Path) -> None:
    """The writer thread appends queued events within its interval, in order."""
    jd = make_job(tmp_path)
    with Reporter(jd, tensorboard=False, write_interval=0.02) as rep:
        t0 = time.monotonic()
        for i in range(50):
            rep.log(i, loss=float(i))
        events: list[dict] = []
        cursor = 0
        while len(events) < 50 and time.monotonic() - t0 < 10:
            got, cursor = MetricsReader(jd.metrics).read(cursor)
            events.extend(got)
            time.sleep(0.005)
        assert [e["step"] for e in events] == list(range(50))
        assert time.monotonic() - t0 < 5


_FORKER = r"""
import os, sys
from pathlib import Path
from alchemist.jobdir import JobDir
from alchemist.metrics.reporter import Reporter
rep = Reporter(JobDir(Path(sys.argv[1])), rank=0, tensorboard=False, write_interval=60)
rep.log(0, loss=1.0)
pid = os.fork()
if pid == 0:  # like a forked DataLoader worker: no writer thread here
    rep.log(1, loss=2.0)
    os._exit(0)
os.waitpid(pid, 0)
rep.close()
"""


def test_forked_child_writes_its_events(tmp_path: Path) -> None:
    jd = make_job(tmp_path, "j-fork")
    subprocess.run([sys.executable, "-c", _FORKER, str(jd.root)], check=True, timeout=60)
    steps = sorted(e["step"] for e in MetricsReader(jd.metrics).read_all())
    assert steps == [0, 1], "the child's event is written, the parent's pending one once"


def test_partial_line_is_held_back_until_complete(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    good = json.dumps({"job_id": "j", "rank": 0, "step": 1, "time": 1.0, "values": {"x": 1.0}})
    path.write_text(good + "\n" + good[:20])
    reader = MetricsReader(path)
    events, cursor = reader.read(0)
    assert len(events) == 1 and cursor == len(good) + 1
    with open(path, "a") as f:
        f.write(good[20:] + "\n")
    events, cursor2 = reader.read(cursor)
    assert len(events) == 1 and events[0]["values"] == {"x": 1.0}
    assert cursor2 == path.stat().st_size
    # A malformed line is skipped and counted, not fatal.
    with open(path, "a") as f:
        f.write("not json\n" + good + "\n")
    events, _ = reader.read(cursor2)
    assert len(events) == 1 and reader.skipped == 1


_WRITER = r"""
import sys, time
from pathlib import Path
from alchemist.jobdir import JobDir
from alchemist.metrics.reporter import Reporter
root, rank, n = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rep = Reporter(JobDir(root), job_id="j-conc", rank=rank, tensorboard=False)
for i in range(n):
    rep.log(i, loss=1.0 / (i + 1), rank_tag=float(rank))
    if i % 500 == 0:
        time.sleep(0.001)
rep.close()
"""


def test_concurrent_writers_while_reading(tmp_path: Path) -> None:
    """Three real writer processes append while the reader tails: every event read once."""
    jd = make_job(tmp_path, "j-conc")
    n = 4000
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(jd.root), str(r), str(n)])
        for r in range(3)
    ]
    reader = MetricsReader(jd.metrics)
    seen: list[dict] = []
    cursor = 0
    reads_with_data = 0
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = all(p.poll() is not None for p in procs)
            events, cursor = reader.read(cursor)
            reads_with_data += bool(events)
            seen.extend(events)
            if done and not events:
                break
            time.sleep(0.005)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    assert all(p.returncode == 0 for p in procs)
    assert reader.skipped == 0
    by_rank: dict[int, list[int]] = {}
    for e in seen:
        assert e["values"]["rank_tag"] == float(e["rank"])
        by_rank.setdefault(e["rank"], []).append(e["step"])
    assert {r: steps for r, steps in by_rank.items()} == {r: list(range(n)) for r in range(3)}
    assert cursor == jd.metrics.stat().st_size


_TORN_WRITER = r"""
import json, os, sys, time
path = sys.argv[1]
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
for i in range(300):
    line = json.dumps({"job_id": "j", "rank": 0, "step": i, "time": time.time(),
                       "values": {"loss": i * 0.5}}) + "\n"
    cut = len(line) // 2
    os.write(fd, line[:cut].encode())   # half a line is visible for a moment
    time.sleep(0.0005)
    os.write(fd, line[cut:].encode())
os.close(fd)
"""


def test_reader_never_returns_a_half_written_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", _TORN_WRITER, str(path)])
    reader = MetricsReader(path)
    steps: list[int] = []
    cursor = 0
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            finished = proc.poll() is not None
            events, cursor = reader.read(cursor)
            steps.extend(e["step"] for e in events)
            if finished and not events:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == 0
    assert steps == list(range(300))
    assert reader.skipped == 0


def test_hundred_thousand_events(tmp_path: Path) -> None:
    jd = make_job(tmp_path)
    n = 100_000
    with Reporter(jd, tensorboard=False) as rep:
        for i in range(n):
            rep.log(i, loss=1.0 / (i + 1), lr=0.1)
    reader = MetricsReader(jd.metrics)
    t0 = time.perf_counter()
    events, cursor = reader.read(0)
    elapsed = time.perf_counter() - t0
    assert len(events) == n and events[-1]["step"] == n - 1
    assert cursor == os.path.getsize(jd.metrics)
    assert elapsed < 15, f"reading {n} events took {elapsed:.1f}s"
    # Paged reads by byte budget cover the same events.
    total, cursor = 0, 0
    while True:
        part, cursor = reader.read(cursor, max_bytes=1 << 20)
        if not part:
            break
        total += len(part)
    assert total == n
    df = events_to_dataframe(events[:10])
    assert list(df.columns) == ["job_id", "rank", "step", "time", "loss", "lr"]
    assert df["step"].tolist() == list(range(10))
