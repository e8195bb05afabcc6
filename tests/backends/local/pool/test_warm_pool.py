"""The warm pool: a user's later local jobs fork their ranks from a pre-imported zygote.

Real: local jobs of 2 ranks (gloo) through the real supervisor, the pool's daemon (its
loopback TCPStore) and zygote, with their real processes inspected through psutil. No
stand-in.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from alchemist import client
from alchemist.backends.local.pool import client as pool_client
from alchemist.backends.local.pool import state
from alchemist.job.spec import JobState
from tests.backends.local.pool.conftest import started
from tests.conftest import processes_under

Run = Callable[..., client.Job]

PIDS = """
import os, alchemist
print("pid", os.getpid(), flush=True)
"""


def pids(job: client.Job) -> set[int]:
    return {int(ln.split()[-1]) for ln in job.logs().splitlines() if " pid " in f" {ln}"}


def sleeping_job() -> client.Job:
    """A 2-rank job whose ranks both printed "up" and then sleep for 10 minutes."""
    job = client.submit(
        'import time\nprint("up", flush=True)\ntime.sleep(600)', namespace={}, workers=2
    )
    deadline = time.monotonic() + 120
    while job.logs().count("up") < 2:
        assert time.monotonic() < deadline, job.logs()
        time.sleep(0.1)
    return job


def pool() -> state.PoolInfo:
    info = state.read_info(state.pool_dir())
    assert info is not None, "no warm pool"
    return info


def test_the_first_job_starts_the_pool_and_later_jobs_fork_fresh_ranks(run: Run) -> None:
    a = run(PIDS)
    b = run(PIDS)
    assert started(a) == "warm" and started(b) == "warm"
    assert len(pids(a)) == 2 and len(pids(b)) == 2
    assert pids(a).isdisjoint(pids(b))  # every rank is a new process
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in pids(a))
    info = pool()
    assert info.served == 2 and info.jobs == [] and info.ranks == 0
    # The zygote never touched CUDA (each fork checks it again).
    ready = json.loads(
        next(
            ln.split("ready: ", 1)[1]
            for ln in (state.pool_dir() / "daemon.log").read_text().splitlines()
            if "ready: " in ln
        )
    )
    assert ready["cuda_initialized"] is False


LEAK = """
import os, random, threading, torch, numpy, alchemist, alchemist.runtime.context as c
c.LEAKED_GLOBAL = 1
os.environ["LEAKED_VAR"] = "1"
torch.manual_seed(1234)
random.seed(7)
numpy.random.seed(7)
threading.Thread(target=lambda: __import__("time").sleep(600), name="leaked", daemon=True).start()
leaked_file = open(os.environ["LEAK_FILE"], "w")
print("leaked", flush=True)
"""

CHECK = """
import os, random, threading, torch, numpy, psutil, alchemist, alchemist.runtime.context as c
seen = {
    "global": hasattr(c, "LEAKED_GLOBAL"),
    "var": "LEAKED_VAR" in os.environ,
    "torch_seed": torch.initial_seed(),
    "random": random.random(),
    "numpy": float(numpy.random.random()),
    "threads": [t.name for t in threading.enumerate()],
    "files": [f.path for f in psutil.Process().open_files()],
}
print("seen", repr(seen), flush=True)
"""


def test_a_job_sees_nothing_of_the_job_before_it(run: Run, tmp_path: Path) -> None:
    import random

    import numpy

    leak_file = str(tmp_path / "leak.txt")
    a = run(LEAK, env={"LEAK_FILE": leak_file})
    b = run(CHECK)
    assert started(a) == "warm" and started(b) == "warm"
    random.seed(7)
    numpy.random.seed(7)
    seeded = (random.random(), float(numpy.random.random()))
    views = [ln.split("seen ", 1)[1] for ln in b.logs().splitlines() if "seen {" in ln]
    assert len(views) == 2
    draws = set()
    for text in views:
        seen = eval(text)  # a dict literal the job printed
        assert seen["global"] is False and seen["var"] is False
        assert seen["torch_seed"] != 1234
        assert (seen["random"], seen["numpy"]) != seeded
        assert "leaked" not in seen["threads"]
        assert leak_file not in seen["files"]
        draws.add(seen["random"])
    assert len(draws) == 2  # the ranks' random streams differ, as new processes' do


def test_logs_stay_per_job_and_rank(run: Run) -> None:
    a = run('import alchemist\nprint("A says", alchemist.context().rank, flush=True)')
    b = run('import alchemist\nprint("B says", alchemist.context().rank, flush=True)')
    for job, word, other in ((a, "A", "B"), (b, "B", "A")):
        for rank in (0, 1):
            log = job.logs(rank=rank)
            assert f"{word} says {rank}" in log
            assert f"{other} says" not in log and f"{word} says {1 - rank}" not in log


def test_cancel_and_timeout_through_the_pool(run: Run, alchemist_home: Path) -> None:
    run(PIDS)  # the pool is up
    job = sleeping_job()
    assert started(job) == "warm"
    job.cancel()
    assert job.status().state == JobState.CANCELLED
    assert processes_under(job.job_dir.root) == []

    timed = run("import time\ntime.sleep(600)", expect=JobState.FAILED, timeout=3)
    assert started(timed) == "warm"
    assert timed.status().reason == "timed out after 3 s (--timeout)"
    # the supervisor writes the final state just before it exits: let it finish exiting
    _, left = psutil.wait_procs(processes_under(timed.job_dir.root), timeout=10)
    assert left == []
    assert pool().served == 3  # the pool served all three, and is still up


def test_cancelling_the_job_that_started_the_pool_leaves_the_pool_up(pools: Path) -> None:
    """The first job's supervisor starts the daemon, which is its child until that
    supervisor ends: cancelling that job stops the job's processes, never the pool
    (stopping a session whose supervisor had started the pool once took the daemon and
    the zygote with it: tests/interactive/test_warm.py)."""
    job = sleeping_job()
    assert started(job) == "warm"
    daemon = pool().pid
    job.cancel()
    assert job.status().state == JobState.CANCELLED
    assert psutil.pid_exists(daemon) and pool().status == "ready"
    assert pool().pid == daemon


def test_a_rank_that_exits_fails_the_job_with_its_status_and_the_pool_survives(run: Run) -> None:
    job = run(
        "import os, time, alchemist, torch, torch.distributed as dist\n"
        "if alchemist.context().rank == 1:\n    os._exit(3)\n"
        "dist.all_reduce(torch.ones(1))\n",
        expect=JobState.FAILED,
    )
    assert started(job) == "warm"
    assert job.status().reason == "rank 1 exited with status 3 before its code finished"
    daemon = pool().pid
    after = run(PIDS)
    assert started(after) == "warm" and pool().pid == daemon


def test_a_restart_forks_the_whole_group_again_on_a_new_attempt(run: Run) -> None:
    job = run(
        "import os, alchemist, torch, torch.distributed as dist\n"
        "attempt = int(os.environ['TORCHELASTIC_RESTART_COUNT'])\n"
        "t = torch.ones(1) * (alchemist.context().rank + 1)\n"
        "dist.all_reduce(t)\n"
        "print('attempt', attempt, 'sum', t.item(), os.getpid(), flush=True)\n"
        "if attempt == 0 and alchemist.context().rank == 1:\n"
        "    raise ValueError('first try fails')\n",
        max_restarts=1,
    )
    assert started(job) == "warm"
    status = job.status()
    assert status.restarts == 1
    lines = [ln for ln in job.logs().splitlines() if "attempt " in ln and " sum " in ln]
    assert sorted(ln.split("] ", 1)[1].split()[1] for ln in lines) == ["0", "0", "1", "1"]
    assert all("sum 3.0" in ln for ln in lines)
    first = {ln.split()[-1] for ln in lines if "attempt 0" in ln}
    second = {ln.split()[-1] for ln in lines if "attempt 1" in ln}
    assert first.isdisjoint(second)  # fresh processes for the new attempt


def test_a_failing_cell_is_reported_as_cold_and_outputs_come_back(run: Run) -> None:
    failed = run(
        "import alchemist\nif alchemist.context().rank == 1:\n    raise ValueError('bad shape')\n",
        expect=JobState.FAILED,
    )
    assert started(failed) == "warm"
    assert failed.status().reason == "rank 1 failed: ValueError: bad shape"
    # the same while rank 0 waits for rank 1 in a collective (and is stopped)
    waiting = run(
        "import alchemist, torch, torch.distributed as dist\n"
        "if alchemist.context().rank == 1:\n    raise ValueError('bad shape')\n"
        "dist.all_reduce(torch.ones(1))\n",
        expect=JobState.FAILED,
    )
    assert waiting.status().reason == "rank 1 failed: ValueError: bad shape"
    ok = run("import alchemist\nx = {'rank': alchemist.context().rank}\n", outputs=["x"])
    assert ok.outputs() == {"x": {"rank": 0}}


def test_two_concurrent_jobs_from_one_pool_get_their_own_sums(run: Run) -> None:
    run(PIDS)
    cell = (
        "import time, torch, torch.distributed as dist, alchemist\n"
        "r = alchemist.context().rank\n"
        "for i in range(20):\n"
        "    t = torch.ones(1) * (r + 1) * {scale}\n"
        "    dist.all_reduce(t)\n"
        "    assert t.item() == 3 * {scale}, t\n"
        "    time.sleep(0.02)\n"
        "print('sum', t.item(), flush=True)\n"
    )
    a = client.submit(cell.format(scale=1), namespace={}, workers=2)
    b = client.submit(cell.format(scale=10), namespace={}, workers=2)
    for job, total in ((a, 3.0), (b, 30.0)):
        assert job.wait(timeout=120).state == JobState.SUCCEEDED, job.logs()
        assert started(job) == "warm"
        assert job.logs().count(f"sum {total}") == 2


def test_no_warm_runs_cold(run: Run) -> None:
    job = run(PIDS, no_warm=True)
    assert started(job) == "cold"
    assert (job.job_dir.pids / "torchrun.pid").exists()


def _wheel(folder: Path, name: str) -> Path:
    """A real wheel of a one-module package, written by hand (no build backend needed)."""
    import base64
    import hashlib
    import zipfile

    files = {
        f"{name}.py": b"VALUE = 42\n",
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{name}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = (
        "".join(
            f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
            for path, data in files.items()
        )
        + f"{name}-1.0.dist-info/RECORD,,\n"
    )
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr(f"{name}-1.0.dist-info/RECORD", record)
    return wheel


def test_installing_a_package_runs_that_job_cold_and_the_next_warm(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("PYTHONPATH", str(site))  # a folder on the ranks' sys.path
    uses = "import importlib.util\nprint('found', importlib.util.find_spec('tinypkg') is not None, flush=True)"
    before = run(uses)
    assert started(before) == "warm" and before.logs().count("found False") == 2
    daemon = pool().pid
    wheel = _wheel(tmp_path, "tinypkg")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
    )
    changed = run("import tinypkg\nprint('value', tinypkg.VALUE, flush=True)")
    assert started(changed) == "cold"
    assert (
        "packages were installed or removed in " + str(site)
        in changed.job_dir.launcher_log.read_text()
    )
    assert changed.logs().count("value 42") == 2
    after = run("import tinypkg\nprint('value', tinypkg.VALUE, flush=True)")
    assert started(after) == "warm" and after.logs().count("value 42") == 2
    assert pool().pid != daemon  # rebuilt


def test_a_job_that_sets_an_import_time_variable_runs_cold(run: Run) -> None:
    job = run(PIDS, env={"OPENBLAS_NUM_THREADS": "2"})
    assert started(job) == "cold"
    assert "the job sets OPENBLAS_NUM_THREADS" in job.job_dir.launcher_log.read_text()


def test_keepalive_expiry_ends_the_daemon(
    run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(state.KEEPALIVE_VAR, "0.05")  # 3 s
    release = tmp_path / "release"
    cell = (
        "import os, time, pathlib\n"
        "print('up', flush=True)\n"
        "while not pathlib.Path(os.environ['RELEASE']).exists():\n"
        "    time.sleep(0.05)\n"
    )
    job = client.submit(cell, namespace={}, workers=2, env={"RELEASE": str(release)})
    deadline = time.monotonic() + 120
    while job.logs().count("up") < 2:  # the pool serves it: no idle time runs out now
        assert time.monotonic() < deadline, job.logs()
        time.sleep(0.05)
    daemon = psutil.Process(pool().pid)
    release.touch()
    assert job.wait(timeout=60).state == JobState.SUCCEEDED
    daemon.wait(timeout=60)  # ends by itself, once idle for 3 s
    assert state.read_info(state.pool_dir()) is None
    assert not state.socket_path(state.pool_dir()).exists()


def test_pool_stop_ends_the_pool_and_the_next_job_starts_a_new_one(run: Run) -> None:
    run(PIDS)
    first = pool().pid
    assert pool_client.stop() is True
    assert not psutil.pid_exists(first) or psutil.Process(first).status() == "zombie"
    assert state.status()["running"] is False
    job = run(PIDS)
    assert started(job) == "warm" and pool().pid != first


def test_a_kernel_restart_leaves_the_pool_and_its_jobs_alone(
    run: Run, alchemist_home: Path
) -> None:
    from jupyter_client.manager import start_new_kernel

    run(PIDS)
    daemon = pool().pid
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        kc.execute_interactive("%load_ext alchemist", timeout=60)
        kc.execute_interactive(
            "%%alchemist_distributed -n 2 --detach --name kept\n"
            "import time\nprint('up', flush=True)\ntime.sleep(4)\nprint('done', flush=True)\n",
            timeout=60,
        )
        job = next(j for j in client.jobs() if j.name == "kept")
        deadline = time.monotonic() + 60
        while job.logs().count("up") < 2:
            assert time.monotonic() < deadline, job.logs()
            time.sleep(0.1)
        km.restart_kernel(now=True)
    finally:
        km.shutdown_kernel(now=True)
        kc.stop_channels()
    assert job.wait(timeout=60).state == JobState.SUCCEEDED
    assert started(job) == "warm" and job.logs().count("done") == 2
    assert pool().pid == daemon


def test_another_user_cannot_reach_the_pool(run: Run, pools: Path) -> None:
    """``nobody`` can neither open the pool's socket (its folder is 0700) nor, with the
    folders opened up, be served: the daemon checks each peer's uid and hangs up."""
    from tests.support.helpers import as_nobody

    run(PIDS)
    sock = state.socket_path(state.pool_dir())
    probe = (
        "import socket, sys, json\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n    print('refused', type(e).__name__); sys.exit(0)\n"
        # the daemon may hang up before the request is written (then the write fails)
        "try:\n    s.sendall(json.dumps({'op': 'status'}).encode() + b'\\n')\n"
        "    data = s.recv(65536)\nexcept (BrokenPipeError, ConnectionResetError):\n    data = b''\n"
        "print('answer', repr(data))\n"
    )
    import sys

    denied = as_nobody(sys.executable, "-c", probe, str(sock))
    assert denied.stdout.strip() == "refused PermissionError", denied
    served, folders = pool().served, (pools, state.pool_dir())
    for path in folders:
        path.chmod(0o711)
    sock.chmod(0o777)
    try:
        hung_up = as_nobody(sys.executable, "-c", probe, str(sock))
    finally:
        for path in folders:
            path.chmod(0o700)
    assert hung_up.stdout.strip() == "answer b''", hung_up  # connected, then dropped
    assert pool().served == served


def test_a_pool_folder_another_account_could_write_is_refused(run: Run, pools: Path) -> None:
    pools.chmod(0o777)
    try:
        job = run(PIDS)
    finally:
        pools.chmod(0o700)
    assert started(job) == "cold"
    assert "is not a private folder of yours" in job.job_dir.launcher_log.read_text()


def test_the_zygote_refuses_to_fork_once_cuda_is_initialised(tmp_path: Path) -> None:
    """The check before every fork, against a zygote whose torch says CUDA is up (no GPU
    here: torch.cuda.is_initialized is replaced before the zygote's loop starts)."""
    import subprocess
    import sys

    from alchemist.backends.local.pool.protocol import Lines, encode

    code = (
        "import torch, sys\n"
        "torch.cuda.is_initialized = lambda: True\n"
        "from alchemist.backends.local.pool import zygote\n"
        "sys.exit(zygote.main())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    lines = Lines(proc.stdout.fileno())
    msgs: list[dict] = []
    deadline = time.monotonic() + 120
    while not any("ready" in m for m in msgs):
        assert time.monotonic() < deadline and not lines.eof
        msgs += lines.wait(1.0)
    proc.stdin.write(
        encode(
            {
                "op": "fork",
                "tag": "t",
                "job_root": str(tmp_path),
                "cwd": str(tmp_path),
                "log": str(tmp_path / "log"),
                "ranks": [{}],
            }
        )
    )
    proc.stdin.flush()
    while not any("error" in m for m in msgs):
        assert time.monotonic() < deadline and not lines.eof
        msgs += lines.wait(1.0)
    assert proc.wait(timeout=30) == 1
    assert [m["error"] for m in msgs if "error" in m] == ["CUDA was initialised in the zygote"]
    assert not any("forked" in m for m in msgs)


def test_many_jobs_through_one_pool_with_no_failure_and_no_leak(
    run: Run, alchemist_home: Path
) -> None:
    jobs = int(os.environ.get("ALCHEMIST_POOL_STRESS_JOBS", "200"))
    daemon = None
    cell = (
        "import torch, torch.distributed as dist, alchemist\n"
        "t = torch.ones(1) * (alchemist.context().rank + 1)\n"
        "dist.all_reduce(t)\nassert t.item() == 3.0\n"
    )
    failed = []
    for i in range(jobs):
        job = run(cell, expect=None)
        if job.status().state != JobState.SUCCEEDED or started(job) != "warm":
            failed.append((i, job.status(), started(job)))
        daemon = daemon or pool().pid
    assert failed == []
    assert pool().pid == daemon and pool().served == jobs
    assert processes_under(alchemist_home) == []
    zygote = [c for c in psutil.Process(daemon).children() if "zygote" in " ".join(c.cmdline())]
    assert len(zygote) == 1 and zygote[0].children() == []  # every rank was reaped


def test_the_dry_run_says_how_the_ranks_start(pools: Path) -> None:
    warm = client.submit(PIDS, namespace={}, workers=2, dry_run=True)
    cold = client.submit(PIDS, namespace={}, workers=2, dry_run=True, no_warm=True)
    assert "# warm start: the ranks fork from your warm pool" in warm.text
    assert "warm start" not in cold.text
