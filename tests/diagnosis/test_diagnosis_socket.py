"""The ranks' unix-socket responder: how a local job's ranks are asked first.

Real parts: 2-rank jobs on the local backend (``alchemist.client.submit``: supervisor,
torchrun or the warm pool, gloo), whose ranks install the real hooks and listen on real
unix sockets in ``<tmp>/alchemist-diag-<uid>/``; the collector connects to them, and
falls back to the signal and the request file when a socket is gone or stale. Another
account is the real ``nobody`` (the tests run as root). Waits poll for a condition with
a deadline; every job is cancelled or ends.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from alchemist import client
from alchemist.backends.local.procs import read_pid
from alchemist.diagnosis import collect, stacks
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobState
from alchemist.runtime import hooks
from tests.support.diagnose import diagnose_until, line_of, logged, wait_for
from tests.support.helpers import as_nobody

CELL = """
import time, torch, torch.distributed as dist, alchemist
from pathlib import Path
def load_batch():
    while not Path(RELEASE).exists():
        time.sleep(0.05)
rank = dist.get_rank()
for step in range(3):
    alchemist.log(step, loss=1.0)
print(f"rank {rank} ready", flush=True)
if rank == 1:
    load_batch()
dist.all_reduce(torch.ones(1))
"""

#: Connects to the socket in argv[1], asks for stacks, prints what came back.
PROBE = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "try:\n    s.connect(sys.argv[1])\n"
    "except OSError as e:\n    print('refused', type(e).__name__); sys.exit(0)\n"
    "data = b''\n"
    "try:\n"
    "    s.sendall(b'stacks\\n')\n"
    "    while chunk := s.recv(65536):\n        data += chunk\n"
    "except (BrokenPipeError, ConnectionResetError):\n    pass  # hung up on\n"
    "print('answer', len(data))\n"
)


def stuck_job(submit: Callable[..., client.Job], release: Path) -> client.Job:
    job = submit(CELL, namespace={"RELEASE": str(release)})
    wait_for(
        lambda: logged(job, 0, "rank 0 ready") and logged(job, 1, "rank 1 ready"), 120, "ready"
    )
    return job


def sockets(job: client.Job) -> list[Path]:
    found = []
    for rank in range(2):
        marker = hooks.read_marker(job.job_dir, rank)
        assert marker is not None and marker["socket"], marker
        found.append(Path(marker["socket"]))
    return found


def check_missing_rank_1(found: dict[str, object]) -> None:
    """Rank 1 is caught in ``load_batch``'s polling loop: on its ``while`` line or its
    sleep, whichever the sample lands on."""
    loop = (line_of(CELL, "while not Path"), line_of(CELL, "time.sleep(0.05)"))
    assert any(
        str(found["headline"]).startswith(
            f"rank 1 has not reached all_reduce; it is in `load_batch` (cell line {line})"
        )
        for line in loop
    ), found["headline"]


@pytest.mark.parametrize("start", ["cold", "warm"])
def test_a_stuck_job_s_ranks_answer_on_their_sockets_with_every_thread(
    submit: Callable[..., client.Job],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    start: str,
) -> None:
    """Each rank process, cold-started by torchrun or forked from the warm pool, listens
    on a socket of its own; the diagnosis gets every thread and the flight recorder from
    it without a signal, and the sockets are removed when the ranks end."""
    if start == "cold":
        monkeypatch.setenv("ALCHEMIST_WARM_POOL", "0")
    else:  # a pool is up once a job has run (the first may start cold, starting it)
        assert client.submit("pass", namespace={}, workers=2).wait(timeout=180).state == (
            JobState.SUCCEEDED
        )
    release = tmp_path / "release"
    job = stuck_job(submit, release)
    launcher = job.job_dir.launcher_log.read_text()
    assert ("[alchemist] warm start:" in launcher) == (start == "warm"), launcher

    found = diagnose_until(job, "missing_rank")
    check_missing_rank_1(found)
    assert found["answered"] == 2 and not found["partial"], found["notes"]
    assert found["elapsed_s"] < 3.0, found["elapsed_s"]
    for entry in found["ranks"]:
        assert entry["stacks_from"] == "socket" and entry["answered"], entry
        assert len(entry["threads"]) > 1  # every thread, not the main one alone
        assert [t["main"] for t in entry["threads"]].count(True) == 1
        # asked on its socket alone: no signal wrote a stack
        assert hooks.stacks_path(job.job_dir, entry["rank"]).stat().st_size == 0
    rank0 = found["ranks"][0]
    assert rank0["collective_op"] == "all_reduce"  # the recorder came with the answer
    assert not list(hooks.requests_dir(job.job_dir).glob("*.req*")), "no request file"

    # A socket per rank process, private to this account.
    paths = sockets(job)
    assert paths == [hooks.socket_dir() / f"{job.id}-{r}.sock" for r in range(2)]
    assert stat.S_IMODE(hooks.socket_dir().stat().st_mode) == 0o700
    for rank, path in enumerate(paths):
        assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(path))
            pid, uid, _ = hooks.peer_credentials(s)
        assert (pid, uid) == (read_pid(job.job_dir.rank_pid(rank)), os.getuid())

    # The ranks' code ends: their sockets go with them.
    release.touch()
    assert job.wait(timeout=60).state == JobState.SUCCEEDED
    assert not any(p.exists() for p in paths), paths


def test_a_rank_whose_socket_is_gone_or_stale_is_diagnosed_by_the_signal(
    submit: Callable[..., client.Job], tmp_path: Path
) -> None:
    job = stuck_job(submit, tmp_path / "release")
    sock0, sock1 = sockets(job)

    sock1.unlink()  # gone: rank 1 is signalled, rank 0 still answers on its socket
    found = diagnose_until(job, "missing_rank")
    check_missing_rank_1(found)
    rank0, rank1 = found["ranks"]
    assert (rank0["stacks_from"], rank1["stacks_from"]) == ("socket", "signal")
    assert rank1["answered"] and not found["partial"]
    assert rank1["activity"]["user_frame"]["function"] == "load_batch"

    # Stale: a socket file with no listener (a killed rank's) in rank 0's place.
    sock0.unlink()
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(sock0))
    found = diagnose_until(job, "missing_rank")
    check_missing_rank_1(found)
    rank0, rank1 = found["ranks"]
    assert (rank0["stacks_from"], rank1["stacks_from"]) == ("signal", "signal")
    assert rank0["collective_op"] == "all_reduce"  # the request file's answer
    assert found["elapsed_s"] < 3.0 and not found["partial"]
    assert job.status().state == JobState.RUNNING


def test_another_account_cannot_connect_and_is_hung_up_on(tmp_path: Path) -> None:
    """``nobody`` cannot reach a socket in the private folder; with a folder open to it,
    the responder reads its uid and hangs up. The same probe as this account gets
    the stacks."""
    responder = hooks._SocketResponder(
        hooks.make_socket_dir() / f"jsockettest{os.getpid()}-0.sock", rank=0
    )
    opened = Path(tempfile.mkdtemp(prefix="alch-sock-"))  # short: under the path limit
    try:
        denied = as_nobody(sys.executable, "-c", PROBE, str(responder.path))
        assert denied.stdout.strip() == "refused PermissionError", denied

        opened.chmod(0o711)
        open_responder = hooks._SocketResponder(opened / "s.sock", rank=0)
        try:
            (opened / "s.sock").chmod(0o777)
            hung_up = as_nobody(sys.executable, "-c", PROBE, str(opened / "s.sock"))
            assert hung_up.stdout.strip() == "answer 0", hung_up  # connected, then dropped
            mine = subprocess.run(
                [sys.executable, "-c", PROBE, str(opened / "s.sock")],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert mine.stdout.startswith("answer ") and mine.stdout.split()[1] != "0", mine
        finally:
            open_responder.stop()
    finally:
        responder.stop()
        shutil.rmtree(opened, ignore_errors=True)
    assert not responder.path.exists()


def test_a_stale_socket_is_replaced_and_an_unsafe_folder_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket file left by a killed rank is replaced by the next responder at that
    path; a socket folder another account can write or owns is refused (the rank then
    goes without a socket: the signal and the request file still answer)."""
    folder = hooks.make_socket_dir()
    path = folder / f"jstaletest{os.getpid()}-1.sock"
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(path))
    responder = hooks._SocketResponder(path, rank=1)
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(path))
            s.sendall(hooks.SOCKET_REQUEST)
            answer = b"".join(iter(lambda: s.recv(65536), b"")).decode()
        threads = stacks.parse_dump(answer)
        assert threads[0].id == threading.main_thread().ident
        assert answer.startswith("Request by socket (rank 1, pid ")
        assert answer.splitlines()[-1].startswith("Flight recorder: ")
    finally:
        responder.stop()
    assert not path.exists()

    # A rank that starts removes the stale sockets a minute old, and only those.
    live = hooks._SocketResponder(folder / f"jlivetest{os.getpid()}-0.sock", rank=0)
    try:
        old, new = folder / f"jold{os.getpid()}-0.sock", folder / f"jnew{os.getpid()}-0.sock"
        for stale_path in (old, new):
            with socket.socket(socket.AF_UNIX) as stale:
                stale.bind(str(stale_path))
        hour_ago = time.time() - 3600
        for kept in (old, live.path):
            os.utime(kept, (hour_ago, hour_ago), follow_symlinks=False)
        hooks.sweep_stale_sockets(folder)
        assert not old.exists() and new.exists() and live.path.exists()
        new.unlink()
    finally:
        live.stop()

    bad = hooks.socket_dir()
    bad.rmdir()
    bad.mkdir(mode=0o700)
    bad.chmod(0o777)
    with pytest.raises(OSError, match="can be written by other accounts"):
        hooks.make_socket_dir()
    bad.chmod(0o700)
    os.chown(bad, 65534, 65534)
    with pytest.raises(OSError, match=r"belongs to another account \(uid 65534\)"):
        hooks.make_socket_dir()


def test_a_rank_with_no_usable_socket_folder_says_so_and_still_answers_the_signal(
    tmp_path: Path,
) -> None:
    unsafe = hooks.socket_dir()
    unsafe.mkdir(mode=0o777)
    unsafe.chmod(0o777)
    job_dir = JobDir(tmp_path / "job").create()
    script = (
        "import sys, time\nfrom pathlib import Path\n"
        "from alchemist.runtime import hooks\nfrom alchemist.job.jobdir import JobDir\n"
        "hooks.install(JobDir(Path(sys.argv[1])), 0)\nprint('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(job_dir.root)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("[alchemist] warning: no diagnosis socket: ") and (
            "can be written by other accounts" in first
        ), first
        assert proc.stdout.readline() == "up\n"
        marker = hooks.read_marker(job_dir, 0)
        assert marker is not None and marker["socket"] is None
        rp = collect.RankProcess(0, psutil.Process(proc.pid), None, marker["socket"])
        assert 0 in collect.request_stacks(job_dir, {0: rp}, timeout=5.0)  # the signal
    finally:
        proc.kill()
        proc.wait()


def test_asking_a_rank_while_it_imports_torch_does_not_break_the_import(
    tmp_path: Path,
) -> None:
    """The responders read torch's flight recorder without importing anything: an import
    in their thread while the main thread imports torch deadlocked Python's module locks,
    and the rank's ``import torch`` failed with ``_DeadlockError``."""
    job_dir = JobDir(tmp_path / "job").create()
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from alchemist.runtime import hooks\nfrom alchemist.job.jobdir import JobDir\n"
        "hooks.install(JobDir(Path(sys.argv[1])), 0)\nprint('up', flush=True)\n"
        "import torch.distributed\nprint('imported', flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(job_dir.root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "up\n"
        marker = hooks.read_marker(job_dir, 0)
        assert marker is not None
        rp = collect.RankProcess(0, psutil.Process(proc.pid), None, marker["socket"])
        answered = 0
        while proc.poll() is None:  # ask as fast as it answers, all through the import
            answered += len(collect.socket_answers({0: rp}, time.monotonic() + 1.0))
        out = proc.stdout.read()
        assert proc.returncode == 0 and out == "imported\n", out
        assert answered > 0
    finally:
        proc.kill()
        proc.wait()
