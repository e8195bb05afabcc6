"""The last lines of a rank log, read from its end (``read_tail``, ``Job.log_tail``):
exact lines, a cursor that follows on without a gap or a repeat, and a cost set by the
lines asked for, not by the log's size."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from alchemist.metrics import tail
from alchemist.metrics.tail import read_lines, read_tail


@pytest.mark.parametrize("seed", range(5))
def test_the_tail_is_the_last_complete_lines(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    path = tmp_path / "rank-0.log"
    for _ in range(60):
        lines = ["x" * rng.randint(0, 200) + str(i) for i in range(rng.randint(0, 40))]
        partial = "partial" if rng.random() < 0.5 else ""
        path.write_text("".join(line + "\n" for line in lines) + partial)
        monkeypatch.setattr(tail, "TAIL_BLOCK", rng.choice([1, 7, 100, 65536]))
        n = rng.randint(0, 45)
        got, cursor, earlier = read_tail(path, n)
        want = lines[max(0, len(lines) - n) :] if n else []
        assert got == want
        assert cursor == sum(len(line) + 1 for line in lines)  # before the partial line
        assert earlier == (len(want) < len(lines))
        path.open("a").write("\nafter\n" if partial else "after\n")
        follow, _, _ = read_lines(path, cursor)
        assert follow == ([partial, "after"] if partial else ["after"])


def test_the_tail_is_bounded_by_bytes(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.log"
    path.write_text("".join(f"{i:09d}\n" for i in range(10_000)))
    got, cursor, earlier = read_tail(path, 5_000, max_bytes=1_000)
    assert got == [f"{i:09d}" for i in range(9_900, 10_000)] and earlier
    assert cursor == path.stat().st_size
    assert read_tail(tmp_path / "missing.log", 10) == ([], 0, False)
    with pytest.raises(ValueError, match="lines and max_bytes"):
        read_tail(path, -1)


def test_the_tail_of_a_big_log_reads_only_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rank-0.log"
    with open(path, "wb") as f:
        f.truncate(200 << 20)  # 200 MB (sparse) ...
        f.seek(0, 2)
        f.write(b"".join(b"line %d\n" % i for i in range(1000)))  # ... then lines
    reads: list[int] = []
    real_open = open

    class Counting:
        def __init__(self, f: object) -> None:
            self.f = f

        def __enter__(self) -> Counting:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()  # type: ignore[attr-defined]

        def seek(self, *a: int) -> int:
            return self.f.seek(*a)  # type: ignore[attr-defined,no-any-return]

        def read(self, n: int) -> bytes:
            reads.append(n)
            return self.f.read(n)  # type: ignore[attr-defined,no-any-return]

    monkeypatch.setattr(tail, "open", lambda p, m: Counting(real_open(p, m)), raising=False)
    got, _, _ = read_tail(path, 10)
    assert got == [f"line {i}" for i in range(990, 1000)]
    assert sum(reads) <= tail.TAIL_BLOCK


def test_a_jobs_log_tail_follows_on_with_log_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    from alchemist import client
    from tests.support.jobs import USER, make_record

    monkeypatch.setenv("JUPYTERHUB_USER", USER)
    record, job_dir = make_record()
    job_dir.rank_log(0).write_text("".join(f"step {i}\n" for i in range(50_000)))
    job = client.attach(record.id)
    chunk = job.log_tail(0, 2)
    assert chunk.lines == ["step 49998", "step 49999"] and chunk.truncated
    with open(job_dir.rank_log(0), "a") as f:
        f.write("done\n")
    assert job.log_chunk(0, chunk.cursor).lines == ["done"]
