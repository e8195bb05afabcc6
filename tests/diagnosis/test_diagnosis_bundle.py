"""The debug bundle, and the flight recorder a rank leaves when a collective times out.

Real parts: 2-rank jobs through ``alchemist.client.submit`` on the local backend
(supervisor, torchrun, gloo); the bundle is written by ``alchemist diagnose --bundle``
and ``%alchemist_diagnose --bundle`` and read back with ``tarfile``. Changed for speed:
the watchdog's 60 s floor (``ALCHEMIST_WATCHDOG_S=1`` in the environment the ranks
inherit) and the process group's 30 min timeout (``ALCHEMIST_COLLECTIVE_TIMEOUT``, the
same way). Waits poll for a condition with a deadline.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

from alchemist import cli, client
from alchemist.diagnosis import bundle, stacks
from alchemist.errors import AlchemistError
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobState
from alchemist.runtime import hooks, recorder
from tests.support.diagnose import diagnose_until, line_of, logged, wait_for

STUCK = """
import time, torch, torch.distributed as dist, alchemist
def load_batch():
    time.sleep(600)
rank = dist.get_rank()
for i in range(300):
    print(f"rank {rank} line {i}")
alchemist.log(0, loss=1.0)
print(f"rank {rank} ready", flush=True)
if rank == 1:
    load_batch()
dist.all_reduce(torch.ones(1))
"""


def members(data: bytes) -> dict[str, bytes]:
    """The bundle's files by name, relative to its one top folder."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        out = {}
        for info in tar.getmembers():
            assert info.isfile(), info.name
            name = info.name.partition("/")[2]
            f = tar.extractfile(info)
            assert f is not None
            out[name] = f.read()
        tops = {m.name.split("/", 1)[0] for m in tar.getmembers()}
    assert len(tops) == 1, tops
    return out


def test_the_bundle_of_a_stuck_job_holds_report_stacks_recorder_log_tails_and_spec(
    submit: Callable[..., client.Job],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    ip: Any,
) -> None:
    monkeypatch.setenv(hooks.WATCHDOG_VAR, "1")  # the ranks inherit the launcher's environment
    job = submit(STUCK)
    wait_for(
        lambda: logged(job, 0, "rank 0 ready") and logged(job, 1, "rank 1 ready"), 120, "ready"
    )
    dogs = {r: hooks.watchdog_path(job.job_dir, r) for r in (0, 1)}
    wait_for(
        lambda: "all_reduce" in dogs[0].read_text() and "load_batch" in dogs[1].read_text(),
        30,
        "the watchdog's dumps of the stuck ranks",
    )
    diagnose_until(job, "missing_rank")
    capsys.readouterr()

    assert cli.main(["diagnose", job.id, "--bundle", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    path = tmp_path / f"alchemist-{job.id}-debug.tar.gz"
    assert err.strip() == f"debug bundle written to {path}"
    assert out.startswith("rank 1 has not reached all_reduce")
    files = members(path.read_bytes())

    assert {
        "report.json",
        "contents.json",
        "spec.json",
        "state.json",
        "source.py",
        "stacks/rank-0.txt",
        "stacks/rank-1.txt",
        "debug/watchdog-rank-0.txt",
        "debug/watchdog-rank-1.txt",
        "logs/rank-0.log",
        "logs/rank-1.log",
        "logs/launcher.log",
    } <= set(files)
    assert not [n for n in files if "requests" in n or n.endswith(".req")]
    report = json.loads(files["report.json"])
    assert report["job_id"] == job.id and report["classification"] == "missing_rank"
    assert report["headline"] == out.splitlines()[0]
    assert report["ranks"][0]["collective_op"] == "all_reduce"  # the flight recorder
    assert report["ranks"][0]["recorder"]["entries"], report["ranks"][0]
    # The stacks the report read (every thread, from the ranks' sockets): rank 1 in
    # load_batch, rank 0 in all_reduce, in faulthandler's format.
    sleep_line = line_of(STUCK, "time.sleep(600)")
    rank1 = files["stacks/rank-1.txt"].decode()
    assert rank1.startswith("Rank 1: stacks from socket at ")
    assert f'File "<cell>", line {sleep_line} in load_batch' in rank1
    threads = stacks.parse_dump(files["stacks/rank-0.txt"].decode())
    assert len(threads) == len(report["ranks"][0]["threads"]) > 1
    assert any(f.function == "all_reduce" for f in threads[0].frames)
    assert "load_batch" in files["debug/watchdog-rank-1.txt"].decode()
    # The last 200 lines of each rank's log; more were written.
    tail = files["logs/rank-0.log"].decode().splitlines()
    assert len(tail) == bundle.LOG_TAIL_LINES
    assert "rank 0 ready" in tail and "rank 0 line 299" in tail and "rank 0 line 0" not in tail
    assert files["logs/launcher.log"].strip()
    assert json.loads(files["spec.json"])["workers"] == 2
    assert files["source.py"].decode().strip() == STUCK.strip()
    listing = {f["name"]: f for f in json.loads(files["contents.json"])["files"]}
    assert listing["logs/rank-0.log"]["cut"] and listing["logs/rank-0.log"]["last_lines"] == 200
    assert not listing["spec.json"]["cut"]
    assert job.status().state == JobState.RUNNING, "a bundle never changes the job"

    # The magic writes the same kind of bundle, to a file name.
    named = tmp_path / "from-the-magic.tar.gz"
    ip.run_line_magic("alchemist_diagnose", f"{job.id} --bundle {named}")
    assert f"debug bundle written to {named}" in capsys.readouterr().out
    assert json.loads(members(named.read_bytes())["report.json"])["job_id"] == job.id
    # A folder that does not exist is one line, from both.
    missing = tmp_path / "no-such-folder" / "b.tar.gz"
    with pytest.raises(UsageError, match=r"^cannot write the debug bundle to .*no-such-folder"):
        ip.run_line_magic("alchemist_diagnose", f"{job.id} --bundle {missing}")
    capsys.readouterr()
    assert cli.main(["diagnose", job.id, "--bundle", str(missing)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("alchemist: error: cannot write the debug bundle") and err.count("\n") == 1
    )


LEAKS = """
import os
token = os.environ["HF_TOKEN"]
print(f"logging in with {token}", flush=True)
raise RuntimeError(f"login refused for {token!r}")
"""


def test_a_bundle_leaves_out_the_jobs_env_values_unless_asked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A bundle is made to be shared: a key passed with ``--env`` is in no member (the
    spec, the logs, the report), wherever the job printed it; the owner who asks gets
    it back."""
    token = "hf_Qx7secretTOKENvalue42"
    job = client.submit(LEAKS, workers=1, env={"HF_TOKEN": token, "SHORT": "on"})
    assert job.wait(timeout=120).state == JobState.FAILED
    assert token in job.job_dir.rank_log(0).read_text()  # the job did leak it
    capsys.readouterr()

    assert cli.main(["diagnose", job.id, "--bundle", str(tmp_path)]) == 0
    files = members((tmp_path / bundle.bundle_name(job.id)).read_bytes())
    leaked = [name for name, data in files.items() if token.encode() in data]
    assert not leaked, leaked
    assert b"login refused for '<redacted: env HF_TOKEN>'" in files["logs/rank-0.log"]
    assert json.loads(files["spec.json"])["env"] == {
        "HF_TOKEN": "<redacted: env HF_TOKEN>",
        "SHORT": "on",
    }
    assert json.loads(files["contents.json"])["redacted_env"] == ["HF_TOKEN"]
    # The REST route's bytes are redacted the same way.
    rest = members(bundle.bundle_bytes(job.job_dir, job.diagnose()))
    assert not [name for name, data in rest.items() if token.encode() in data]

    kept = tmp_path / "with-env.tar.gz"
    assert cli.main(["diagnose", job.id, "--bundle", str(kept), "--bundle-with-env"]) == 0
    files = members(kept.read_bytes())
    assert json.loads(files["spec.json"])["env"]["HF_TOKEN"] == token
    assert json.loads(files["contents.json"])["redacted_env"] == []


TIMEOUT = """
import time, torch, torch.distributed as dist
rank = dist.get_rank()
dist.all_reduce(torch.ones(2))
dist.all_reduce(torch.ones(3))
if rank == 1:
    time.sleep(600)
dist.all_reduce(torch.ones(4))
"""


def test_a_collective_timeout_leaves_the_ranks_flight_recorder_in_the_job_directory(
    submit: Callable[..., client.Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    """gloo fails rank 0's third all_reduce after the process group's timeout (8 s here,
    from ``ALCHEMIST_COLLECTIVE_TIMEOUT``; torch's default is 30 minutes): the rank writes
    its recorder before it exits, and the bundle of the failed job carries it."""
    started = time.monotonic()
    monkeypatch.setenv(recorder.TIMEOUT_VAR, "8")  # the ranks inherit the launcher's env
    job = submit(TIMEOUT)
    assert job.wait(timeout=150).state == JobState.FAILED, job.logs()
    assert time.monotonic() - started < 140
    dumped = json.loads(recorder.dump_path(job.job_dir, 0).read_text())
    assert dumped["rank"] == 0 and dumped["collective_timeout"] is True
    assert dumped["error"].startswith("RuntimeError: ") and "Timed out" in dumped["error"]
    newest = dumped["newest"]
    assert (newest["seq"], newest["op"], newest["sizes"]) == (3, "all_reduce", [[4]])
    entries = dumped["dump"]["entries"]
    assert [(e["collective_seq_id"], e["input_sizes"]) for e in entries] == [
        (1, [[2]]),
        (2, [[3]]),
        (3, [[4]]),
    ]
    assert "Timed out" in job.job_dir.rank_log(0).read_text()

    files = members(bundle.bundle_bytes(job.job_dir, job.diagnose()))
    assert json.loads(files["debug/recorder-rank-0.json"]) == dumped
    assert json.loads(files["report.json"])["classification"] == "not_running"


def test_the_log_tail_starts_at_a_whole_line_and_a_missing_job_dir_gives_a_report_only(
    tmp_path: Path,
) -> None:
    """A log longer than the bytes read: the tail never starts inside a line. A job
    directory with nothing in it (a queued job) still gives a bundle with the report."""
    job_dir = JobDir(tmp_path / "jdone").create()
    line = "x" * 9000
    job_dir.rank_log(0).write_text(
        "".join(f"{i:05d} {line}\n" for i in range(2 * bundle.FILE_MAX_BYTES // 9000))
    )
    files = members(bundle.bundle_bytes(job_dir, {"job_id": "jdone"}, log_lines=500))
    tail = files["logs/rank-0.log"].decode().splitlines()
    assert 0 < len(tail) < 500 and all(t.endswith(line) and len(t) == 9006 for t in tail)
    assert tail[-1].startswith(f"{2 * bundle.FILE_MAX_BYTES // 9000 - 1:05d}")

    empty = JobDir(tmp_path / "jempty")
    empty.root.mkdir()
    assert set(members(bundle.bundle_bytes(empty, {"job_id": "jempty"}))) == {
        "report.json",
        "contents.json",
    }


@pytest.mark.parametrize(
    ("raw", "seconds"), [("", None), (" 8 ", 8.0), ("0.5", 0.5), ("1e3", 1000.0)]
)
def test_the_collective_timeout_is_read_in_seconds(raw: str, seconds: float | None) -> None:
    found = recorder.collective_timeout({recorder.TIMEOUT_VAR: raw})
    assert (found.total_seconds() if found is not None else None) == seconds


@pytest.mark.parametrize("raw", ["0", "-3", "ten", "inf", "nan"])
def test_a_bad_collective_timeout_is_one_line_naming_the_variable(raw: str) -> None:
    with pytest.raises(AlchemistError) as e:
        recorder.collective_timeout({recorder.TIMEOUT_VAR: raw})
    assert str(e.value) == (
        f"ALCHEMIST_COLLECTIVE_TIMEOUT must be a number of seconds above 0, got {raw!r}"
    )


def test_a_job_with_a_bad_collective_timeout_fails_saying_so(
    submit: Callable[..., client.Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(recorder.TIMEOUT_VAR, "soon")
    job = submit("print('never here')\n")
    status = job.wait(timeout=120)
    assert status.state == JobState.FAILED
    said = "ALCHEMIST_COLLECTIVE_TIMEOUT must be a number of seconds above 0, got 'soon'"
    assert said in (status.reason or ""), status.reason
    assert "never here" not in job.job_dir.rank_log(0).read_text()
