"""The metrics pipeline: the reporter's per-rank files and the reader over all of them.

Writers here are real: the Reporter in this process, and real subprocesses appending
concurrently (several ranks at once, each to its own file, and a writer that leaves
lines half written). All files are on this machine's local file system: no NFS runs
here. The one test about NFS's non-atomic appends simulates an NFS client and says so.
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

from alchemist.errors import CursorError
from alchemist.job.jobdir import JobDir
from alchemist.metrics.reader import (
    MetricsReader,
    events_to_dataframe,
    format_cursor,
    parse_cursor,
)
from alchemist.metrics.reporter import Reporter, get_reporter, reporter_from_env, set_reporter


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    """Kill the writer processes still running and reap every one."""
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def make_job(tmp_path: Path, job_id: str = "j-test") -> JobDir:
    return JobDir(tmp_path / job_id).create()


def test_reporter_writes_event_shape_read_back_by_reader(tmp_path: Path) -> None:
    jd = make_job(tmp_path)
    with Reporter(jd, rank=1, tensorboard=False) as rep:
        rep.log(0, loss=2.5, acc=1)
        rep.log(1, loss=float("nan"), big=float("inf"))
    assert rep.path == jd.root / "metrics" / "rank-1.jsonl"
    lines = jd.rank_metrics(1).read_text().splitlines()
    # Each line is plain JSON, equal to what json.dumps of the event would give.
    first = json.loads(lines[0])
    assert first["job_id"] == "j-test" and first["rank"] == 1 and first["step"] == 0
    assert first["values"] == {"loss": 2.5, "acc": 1.0}
    assert abs(first["time"] - time.time()) < 60
    events, cursor = MetricsReader(jd).read(None)
    assert cursor == f"1:{jd.rank_metrics(1).stat().st_size}"
    assert json.loads(json.dumps(cursor)) == cursor
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
        assert rep.rank == 3 and rep.job_id == "j-env" and rep.path == jd.rank_metrics(3)
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
    reader = MetricsReader(jd)
    assert reader.read(None) == ([], "")  # no file yet reads as empty
    assert reader.read(0) == reader.read("") == ([], "")
    with Reporter(jd, tensorboard=False) as rep:
        for i in range(5):
            rep.log(i, loss=float(i))
        rep.flush()
        events, c1 = reader.read("")
        assert [e["step"] for e in events] == [0, 1, 2, 3, 4]
        assert reader.read(c1) == ([], c1)
        for i in range(5, 8):
            rep.log(i, loss=float(i))
        rep.flush()
        # A new reader (a restarted kernel) resumes from the stored cursor.
        events, c2 = MetricsReader(jd).read(c1)
        assert [e["step"] for e in events] == [5, 6, 7]
        assert c2 != c1
        # max_bytes splits a read; the pieces add up to the whole.
        pieces: list[int] = []
        cursor = ""
        while cursor != c2:
            part, cursor = reader.read(cursor, max_bytes=150)
            assert part, "every page holds at least one event"
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
        cursor = ""
        while len(events) < 50 and time.monotonic() - t0 < 10:
            got, cursor = MetricsReader(jd).read(cursor)
            events.extend(got)
            time.sleep(0.005)
        assert [e["step"] for e in events] == list(range(50))
        assert time.monotonic() - t0 < 5


_FORKER = r"""
import os, sys
from pathlib import Path
from alchemist.job.jobdir import JobDir
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
    steps = sorted(e["step"] for e in MetricsReader(jd).read_all())
    assert steps == [0, 1], "the child's event is written, the parent's pending one once"


def test_partial_line_is_held_back_until_complete(tmp_path: Path) -> None:
    jd = make_job(tmp_path)
    path = jd.rank_metrics(0)
    good = json.dumps({"job_id": "j", "rank": 0, "step": 1, "time": 1.0, "values": {"x": 1.0}})
    path.write_text(good + "\n" + good[:20])
    reader = MetricsReader(jd)
    events, cursor = reader.read(None)
    assert len(events) == 1 and cursor == f"0:{len(good) + 1}"
    with open(path, "a") as f:
        f.write(good[20:] + "\n")
    events, cursor2 = reader.read(cursor)
    assert len(events) == 1 and events[0]["values"] == {"x": 1.0}
    assert cursor2 == f"0:{path.stat().st_size}"
    # A malformed line is skipped and counted, not fatal.
    with open(path, "a") as f:
        f.write("not json\n" + good + "\n")
    events, _ = reader.read(cursor2)
    assert len(events) == 1 and reader.skipped == 1


_WRITER = r"""
import sys, time
from pathlib import Path
from alchemist.job.jobdir import JobDir
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
    reader = MetricsReader(jd)
    seen: list[dict] = []
    cursor = ""
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
        _stop_all(procs)
    assert all(p.returncode == 0 for p in procs)
    assert reader.skipped == 0
    by_rank: dict[int, list[int]] = {}
    for e in seen:
        assert e["values"]["rank_tag"] == float(e["rank"])
        by_rank.setdefault(e["rank"], []).append(e["step"])
    assert {r: steps for r, steps in by_rank.items()} == {r: list(range(n)) for r in range(3)}
    assert parse_cursor(cursor) == {str(r): jd.rank_metrics(r).stat().st_size for r in range(3)}


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
    jd = make_job(tmp_path)
    path = jd.rank_metrics(0)
    proc = subprocess.Popen([sys.executable, "-c", _TORN_WRITER, str(path)])
    reader = MetricsReader(jd)
    steps: list[int] = []
    cursor = ""
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
    reader = MetricsReader(jd)
    t0 = time.perf_counter()
    events, cursor = reader.read(None)
    elapsed = time.perf_counter() - t0
    assert len(events) == n and events[-1]["step"] == n - 1
    assert cursor == f"0:{os.path.getsize(jd.rank_metrics(0))}"
    assert elapsed < 15, f"reading {n} events took {elapsed:.1f}s"
    # Paged reads by byte budget cover the same events.
    total, cursor = 0, ""
    while True:
        part, cursor = reader.read(cursor, max_bytes=1 << 20)
        if not part:
            break
        total += len(part)
    assert total == n
    df = events_to_dataframe(events[:10])
    assert list(df.columns) == ["job_id", "rank", "step", "time", "loss", "lr"]
    assert df["step"].tolist() == list(range(10))


# -- one file per rank, one cursor over all of them -------------------------------------------


def _event_line(rank: int, step: int) -> str:
    event = {"job_id": "j", "rank": rank, "step": step, "time": 1.0, "values": {"x": 0.5}}
    return json.dumps(event) + "\n"


def test_cursor_is_an_opaque_json_safe_string() -> None:
    assert parse_cursor(None) == parse_cursor(0) == parse_cursor("") == {}
    assert parse_cursor("0:1834,1:1790") == {"0": 1834, "1": 1790}
    assert format_cursor({"1": 1790, "0": 1834, "2": 0}) == "0:1834,1:1790"
    assert format_cursor({"10": 5, "2": 7, "shared": 9}) == "shared:9,2:7,10:5"
    # A bare integer is the byte offset of the one file earlier versions wrote.
    assert parse_cursor(120) == parse_cursor("120") == {"shared": 120}
    for bad in ("-1", "abc", "0:", ":5", "0:-3", "0:1;1:2", "x:1", 1.5, True):
        with pytest.raises(CursorError, match="cursor"):
            parse_cursor(bad)  # type: ignore[arg-type]


def test_a_rank_whose_file_appears_later_is_read_from_its_start(tmp_path: Path) -> None:
    jd = make_job(tmp_path)
    with open(jd.rank_metrics(0), "a") as f:
        f.write(_event_line(0, 0) + _event_line(0, 1))
    reader = MetricsReader(jd)
    events, cursor = reader.read(None)
    assert [(e["rank"], e["step"]) for e in events] == [(0, 0), (0, 1)]
    with open(jd.rank_metrics(2), "a") as f:  # rank 2 starts late
        f.write(_event_line(2, 0))
    with open(jd.rank_metrics(0), "a") as f:
        f.write(_event_line(0, 2))
    events, cursor = reader.read(cursor)
    assert [(e["rank"], e["step"]) for e in events] == [(0, 2), (2, 0)]
    assert reader.read(cursor) == ([], cursor)
    assert set(parse_cursor(cursor)) == {"0", "2"}


def test_the_byte_budget_is_shared_fairly_between_ranks(tmp_path: Path) -> None:
    """A rank with a long backlog does not hold back another rank's events."""
    jd = make_job(tmp_path)
    with open(jd.rank_metrics(0), "a") as f:
        f.write("".join(_event_line(0, s) for s in range(300)))
    with open(jd.rank_metrics(1), "a") as f:
        f.write("".join(_event_line(1, s) for s in range(3)))
    reader = MetricsReader(jd)
    first = reader.read_chunk(None, max_bytes=2000)
    assert [e["step"] for e in first.events if e["rank"] == 1] == [0, 1, 2]
    assert first.more
    seen = [(e["rank"], e["step"]) for e in first.events]
    chunk = first
    while chunk.more:
        chunk = reader.read_chunk(chunk.cursor, max_bytes=2000)
        assert chunk.events
        seen += [(e["rank"], e["step"]) for e in chunk.events]
    assert sorted(seen) == sorted({(0, s) for s in range(300)} | {(1, s) for s in range(3)})
    assert len(seen) == 303
    assert reader.read_chunk(chunk.cursor, max_bytes=2000) == ([], chunk.cursor, False)


_RANK_WRITER = r"""
import sys, time
from pathlib import Path
from alchemist.job.jobdir import JobDir
from alchemist.metrics.reporter import Reporter
root, rank, n = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rep = Reporter(JobDir(root), job_id="j-ranks", rank=rank, tensorboard=False)
for i in range(n):
    rep.log(i, loss=1.0 / (i + 1))
    if i % 10 == 0:
        time.sleep(0.002)
rep.close()
"""


def test_rank_writers_and_a_polling_reader_that_restarts_see_every_event_once(
    tmp_path: Path,
) -> None:
    """The design, end to end: two writer processes, each appending to its own rank file
    concurrently (rank 1's file appears after the reader's cursor was made), and a reader
    that polls with its cursor and is replaced by a new reader object every few polls,
    with the cursor carried through JSON as a kernel restart or a browser would carry it.

    No NFS here: the writers share this machine's local file system, so this shows one
    writer per file and the cursor's guarantees, not NFS's behaviour itself (see
    ``test_shared_file_loses_events_under_simulated_nfs_appends``).
    """
    jd = make_job(tmp_path, "j-ranks")
    n = 3000

    def start(rank: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-c", _RANK_WRITER, str(jd.root), str(rank), str(n)]
        )

    procs = [start(0)]
    seen: list[tuple[int, int]] = []
    cursor: object = None
    reader = MetricsReader(jd)
    polls = restarts = 0
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = len(procs) == 2 and all(p.poll() is not None for p in procs)
            events, cursor = reader.read(cursor)  # type: ignore[arg-type]
            seen.extend((e["rank"], e["step"]) for e in events)
            polls += 1
            if len(procs) == 1 and seen:
                assert "1" not in parse_cursor(cursor)  # type: ignore[arg-type]
                assert not jd.rank_metrics(1).exists()
                procs.append(start(1))
            if polls % 5 == 0:  # a restart: a new reader, the cursor kept as JSON
                cursor = json.loads(json.dumps({"cursor": cursor}))["cursor"]
                reader = MetricsReader(jd.root)
                restarts += 1
            if done and not events:
                break
            time.sleep(0.003)
    finally:
        _stop_all(procs)
    assert [p.returncode for p in procs] == [0, 0]
    assert restarts > 2
    assert len(seen) == len(set(seen)), "no event twice"
    for rank in (0, 1):
        assert [s for r, s in seen if r == rank] == list(range(n)), "none missed, in order"


class NfsClientStandIn:
    """Simulates how an NFS client appends (no NFS runs here): it writes at the end of the
    file *as it last saw it*, its cached size, not at the file's real end.

    This is what makes ``O_APPEND`` unsafe from several hosts on NFS: the client computes
    the offset itself. A client that is the file's only writer always knows the real end.
    """

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        self.size = os.fstat(self.fd).st_size

    def append(self, data: bytes) -> None:
        os.pwrite(self.fd, data, self.size)
        self.size += len(data)

    def close(self) -> None:
        os.close(self.fd)


def test_shared_file_loses_events_under_simulated_nfs_appends(tmp_path: Path) -> None:
    """Why one file per rank: two simulated NFS clients (pods) appending to one shared
    file overwrite each other's events; each appending to its own rank file, none is
    lost and the reader returns every event once."""
    shared = tmp_path / "shared.jsonl"
    pods = [NfsClientStandIn(shared), NfsClientStandIn(shared)]
    for step in range(10):
        for rank, pod in enumerate(pods):
            pod.append(_event_line(rank, step).encode())
    for pod in pods:
        pod.close()
    lines = shared.read_text().splitlines()
    assert len(lines) < 20, "the shared file lost events (they were overwritten, not torn)"

    jd = make_job(tmp_path)
    pods = [NfsClientStandIn(jd.rank_metrics(rank)) for rank in (0, 1)]
    reader = MetricsReader(jd)
    seen: list[tuple[int, int]] = []
    cursor = ""
    for step in range(10):
        for rank, pod in enumerate(pods):
            pod.append(_event_line(rank, step).encode())
        events, cursor = reader.read(cursor)
        seen += [(e["rank"], e["step"]) for e in events]
    for pod in pods:
        pod.close()
    assert sorted(seen) == [(r, s) for r in (0, 1) for s in range(10)]
    assert len(seen) == 20 and reader.skipped == 0


def test_job_dirs_of_earlier_versions_are_still_read(tmp_path: Path) -> None:
    """Earlier versions appended every rank's events to one ``metrics.jsonl``; such a job
    directory reads as before, and an integer cursor kept from then continues exactly."""
    jd = make_job(tmp_path)
    first = _event_line(0, 0) + _event_line(1, 0)
    jd.shared_metrics().write_text(first + _event_line(0, 1))
    jd.shared_metrics(system=True).write_text(_event_line(1, 0))
    events, cursor = MetricsReader(jd).read(None)
    assert [(e["rank"], e["step"]) for e in events] == [(0, 0), (1, 0), (0, 1)]
    assert cursor == f"shared:{jd.shared_metrics().stat().st_size}"
    old_cursor = len(first.encode())  # what a reader of that version returned
    for since in (old_cursor, str(old_cursor)):
        events, _ = MetricsReader(jd).read(since)
        assert [(e["rank"], e["step"]) for e in events] == [(0, 1)]
    assert len(MetricsReader(jd, system=True).read_all()) == 1


def test_system_metrics_go_to_the_ranks_own_file(tmp_path: Path) -> None:
    from alchemist.metrics.system import SystemSampler

    jd = make_job(tmp_path)
    with (
        Reporter(jd, rank=2, tensorboard=False) as rep,
        Reporter(jd, rank=0, tensorboard=False) as r0,
    ):
        rep.log(5, loss=1.0)
        r0.log(5, loss=2.0)
        sampler = SystemSampler(rep, interval=60, local_rank=0)
        try:
            sampler.write_sample()
        finally:
            sampler.stop()
        # events() reads back every rank's events of the job (as written: flush rank 0)
        r0.flush()
        assert sorted((e["rank"], e["values"]["loss"]) for e in rep.events()) == [
            (0, 2.0),
            (2, 1.0),
        ]
    assert jd.rank_metrics(2, system=True) == jd.root / "metrics" / "system-rank-2.jsonl"
    (event,) = MetricsReader(jd, system=True).read_all()
    assert event["kind"] == "system" and event["rank"] == 2 and event["step"] == 5
    assert "cpu_percent" in event["values"]
    assert all("kind" not in e for e in MetricsReader(jd).read_all())
    assert sorted(jd.metrics_by_rank()) == [0, 2]
    assert sorted(jd.metrics_by_rank(system=True)) == [2]


def test_lines_with_the_wrong_types_are_skipped_and_counted_by_every_view(
    tmp_path: Path,
) -> None:
    """A stray edit or a torn write that still parses as JSON is not an event: the
    reader, the summary (the panel's first view) and the latest-event lookup skip it."""
    from alchemist.metrics.reader import parse_event

    jd = make_job(tmp_path)
    good = [_event_line(0, s) for s in range(3)]
    bad = [
        '{"rank": "0", "step": 1, "values": {"x": 1.0}}\n',
        '{"rank": 0, "step": "1", "values": {"x": 1.0}}\n',
        '{"rank": 0, "step": 1e400, "values": {"x": 1.0}}\n',
        '{"rank": 0, "step": 1, "values": {"x": "1.0"}}\n',
        '{"rank": 0, "step": 1, "values": {"x": null}}\n',
        '{"rank": 0, "step": 1, "time": [1], "values": {"x": 1.0}}\n',
        '{"rank": 0, "step": 1, "values": {"total_steps": {}}}\n',
        '{"rank": 0, "step": 1, "values": {"x": 1.0\n',  # truncated
    ]
    jd.rank_metrics(0).write_text(good[0] + "".join(bad) + good[1] + good[2])
    for line in bad:
        assert parse_event(line.strip()) is None, line
    # a NaN or infinite value is a value (the reporter writes them), and null steps are
    # system metrics'
    assert parse_event('{"rank": 0, "step": 1, "values": {"x": NaN, "y": -Infinity}}')
    assert parse_event('{"rank": 0, "step": null, "time": 1.0, "values": {"cpu": 5}}')

    reader = MetricsReader(jd)
    events, _ = reader.read(None)
    assert [e["step"] for e in events] == [0, 1, 2] and reader.skipped == len(bad)
    overview = MetricsReader(jd).overview(100)
    assert overview.series[("x", 0)].steps == [0, 1, 2] and overview.skipped == len(bad)
    # a second view folds from the cached summary: the count stays the history's
    assert MetricsReader(jd).overview(100).skipped == len(bad)


def test_a_cursor_too_large_for_a_file_offset_is_a_cursor_error(tmp_path: Path) -> None:
    for bad in (
        "99999999999999999999999",
        str(10**400),
        "9" * 5000,
        "0:9223372036854775808",
        f"0:{'9' * 5000}",
        f"{'9' * 5000}:1",
        10**30,
    ):
        with pytest.raises(CursorError, match="cursor"):
            parse_cursor(bad)
    assert parse_cursor("0:9223372036854775807") == {"0": 9223372036854775807}


def test_a_cursor_past_the_end_of_a_file_reads_nothing_there(tmp_path: Path) -> None:
    """ext4 refuses to seek past 16 TiB (EINVAL): such a cursor reads as the end."""
    jd = make_job(tmp_path)
    jd.rank_metrics(0).write_text(_event_line(0, 0))
    jd.rank_metrics(1).write_text(_event_line(1, 0))
    far = (1 << 63) - 1
    events, cursor = MetricsReader(jd).read(f"0:{far}")
    assert [e["rank"] for e in events] == [1]
    assert parse_cursor(cursor)["0"] == far
