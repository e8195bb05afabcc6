"""A local job listens on loopback only: nobody off this machine can reach its sockets.

Real: a two-rank local job training with ``async``, so rank 0 also runs the parameter
server, started cold (the supervisor, the launcher running torchrun, two rank
processes) and warm (two ranks forked from the user's warm pool, whose daemon holds the
store); the listening sockets are read from the kernel through psutil while the job
runs. No stand-in.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import time
from pathlib import Path

import psutil
import pytest

import alchemist
from alchemist.backends.local.pool import state as pool_state
from alchemist.job.spec import JobState
from tests.conftest import processes_under

CELL = """
import os, pathlib, time, torch, alchemist
ctx = alchemist.context()
model = torch.nn.Linear(4, 2)
model, opt = alchemist.distribute(model, torch.optim.SGD(model.parameters(), lr=0.1))
if ctx.rank == 0:
    print("ps-port", opt.server.port, flush=True)
print("store", os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"], flush=True)
release, deadline = pathlib.Path(os.environ["RELEASE"]), time.monotonic() + 120
while not release.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def listening(procs: list[psutil.Process]) -> dict[int, tuple[str, list[tuple[str, int]]]]:
    """pid -> (command line, the (address, port) pairs it listens on, TCP and UDP)."""
    found: dict[int, tuple[str, list[tuple[str, int]]]] = {}
    for proc in procs:
        try:
            cmd, conns = " ".join(proc.cmdline()), proc.net_connections(kind="inet")
        except psutil.Error:
            continue
        found[proc.pid] = (
            cmd,
            [
                (c.laddr.ip, c.laddr.port)
                for c in conns
                if c.status == psutil.CONN_LISTEN or (c.type == socket.SOCK_DGRAM and not c.raddr)
            ],
        )
    return found


@pytest.mark.parametrize("start", ["cold", "warm"])
def test_a_local_job_listens_on_loopback_only(
    alchemist_home: Path, tmp_path: Path, start: str
) -> None:
    release = tmp_path / "release"
    job = alchemist.submit(
        CELL,
        workers=2,
        algorithm="async",
        env={"RELEASE": str(release)},
        namespace={},
        no_warm=start == "cold",
    )
    try:
        deadline = time.monotonic() + 120
        while job.logs().count("store ") < 2 or "ps-port" not in job.logs():
            assert time.monotonic() < deadline, job.logs()
            assert not job.status().state.is_terminal, job.logs()
            time.sleep(0.1)
        logs = job.logs()
        procs = processes_under(alchemist_home)
        pool = pool_state.read_info(pool_state.pool_dir())
        if start == "warm":
            assert pool is not None
            procs.append(psutil.Process(pool.pid))
        sockets = listening(procs)
    finally:
        release.touch()
    status = job.wait(timeout=120)
    assert status.state == JobState.SUCCEEDED, (status, job.logs())
    if start == "warm":  # not vacuous: the ranks were the pool's
        assert "warm start" in job.job_dir.launcher_log.read_text()

    rank_pids = {int(p.read_text()) for p in job.job_dir.pids.glob("rank-*.pid")}
    ranks = [pid for pid in sockets if pid in rank_pids]
    if start == "cold":
        holder = [pid for pid, (cmd, _) in sockets.items() if "torch.distributed.run" in cmd]
    else:
        assert pool is not None
        holder = [pool.pid]
    assert len(holder) == 1 and len(ranks) == 2, sockets

    exposed = [
        (cmd, addr)
        for cmd, addrs in sockets.values()
        for addr in addrs
        if not ipaddress.ip_address(addr[0]).is_loopback
    ]
    assert exposed == [], f"listening beyond loopback: {exposed}"

    # Not vacuous: the store and the parameter server were among what was inspected.
    store = re.search(r"store (\S+) (\d+)", logs)
    ps_port = re.search(r"ps-port (\d+)", logs)
    assert store and ps_port
    assert store.group(1) == "127.0.0.1"
    assert ("127.0.0.1", int(store.group(2))) in sockets[holder[0]][1]
    assert ("127.0.0.1", int(ps_port.group(1))) in [a for pid in ranks for a in sockets[pid][1]]


HOROVOD_CELL = """
import os, pathlib, time, torch, alchemist
import horovod.torch as hvd
hvd.init()
print("size", hvd.size(), hvd.allreduce(torch.ones(1), op=hvd.Sum).item(), flush=True)
release, deadline = pathlib.Path(os.environ["RELEASE"]), time.monotonic() + 120
while not release.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def test_a_local_horovod_job_listens_on_loopback_only(alchemist_home: Path, tmp_path: Path) -> None:
    """horovodrun binds its rendezvous (an HTTP key-value store the ranks meet at) to
    every interface; the local backend's horovodrun keeps it, and the ranks' gloo
    sockets, on loopback."""
    pytest.importorskip("horovod.torch", reason="Horovod is not installed (50-horovod.sh)")
    release = tmp_path / "release"
    job = alchemist.submit(
        HOROVOD_CELL,
        workers=2,
        algorithm="horovod",
        env={"RELEASE": str(release)},
        namespace={},
    )
    try:
        deadline = time.monotonic() + 180
        while job.logs().count("size 2 2.0") < 2:
            assert time.monotonic() < deadline, job.logs()
            assert not job.status().state.is_terminal, (job.logs(), job.status())
            time.sleep(0.1)
        sockets = listening(processes_under(alchemist_home))
    finally:
        release.touch()
    status = job.wait(timeout=120)
    assert status.state == JobState.SUCCEEDED, (status, job.logs())
    exposed = [
        (cmd, addr)
        for cmd, addrs in sockets.values()
        for addr in addrs
        if not ipaddress.ip_address(addr[0]).is_loopback
    ]
    assert exposed == [], f"listening beyond loopback: {exposed}"
    # Not vacuous: the launcher's rendezvous was among what was inspected.
    launchers = [pid for pid, (cmd, _) in sockets.items() if "horovod" in cmd and "-np" in cmd]
    assert len(launchers) == 1 and sockets[launchers[0]][1], sockets
