"""A Horovod job's pod: ``python -m alchemist.backends.horovod_pod JOB_DIR ...``.

On Kubernetes there is no ``horovodrun`` driver that can ssh into every pod, so each
pod does, for its own ranks, what ``horovodrun --gloo`` does for every slot: the
allocation plan is the same on every pod (``worker-<i>`` has ``procs`` slots, in index
order, as ``horovod.runner.common.util.hosts.get_host_assignments`` assigns them), pod
0 also runs Horovod's own gloo rendezvous server (``RendezvousHTTPServer`` with that
plan) on the job's master port, and each pod starts its ranks as
``python -u -m alchemist.runtime JOB_DIR`` with the variables ``horovodrun`` sets:
``HOROVOD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE/CROSS_RANK/CROSS_SIZE/HOSTNAME``, the
rendezvous address and port, the gloo controller and CPU operations, and NCCL for GPU
operations when the job has GPUs. The pod exits with the first failing rank's status.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

#: How long a pod waits for pod 0's rendezvous server before it gives up.
RENDEZVOUS_WAIT_S = 300.0
#: How long pod 0 keeps serving after its own ranks ended (others may still be closing).
LINGER_S = 2.0


def host_name(index: int) -> str:
    return f"worker-{index}"


def plan(workers: int, procs: int) -> list[Any]:
    """Horovod's slot plan for ``workers`` pods of ``procs`` ranks each."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts

    hosts = parse_hosts(",".join(f"{host_name(i)}:{procs}" for i in range(workers)))
    return list(get_host_assignments(hosts, workers * procs))


def rank_env(slot: Any, addr: str, port: int, iface: str, gpus: bool) -> dict[str, str]:
    """What ``horovodrun --gloo`` puts in one rank's environment."""
    env = {
        "HOROVOD_HOSTNAME": slot.hostname,
        "HOROVOD_RANK": str(slot.rank),
        "HOROVOD_SIZE": str(slot.size),
        "HOROVOD_LOCAL_RANK": str(slot.local_rank),
        "HOROVOD_LOCAL_SIZE": str(slot.local_size),
        "HOROVOD_CROSS_RANK": str(slot.cross_rank),
        "HOROVOD_CROSS_SIZE": str(slot.cross_size),
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_IFACE": iface,
    }
    if gpus:
        env["HOROVOD_GPU_OPERATIONS"] = "NCCL"
    return env


def serve_rendezvous(port: int, slots: list[Any]) -> Any:
    """Pod 0: Horovod's gloo rendezvous server on ``port``, initialised with the plan."""
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    httpd = RendezvousHTTPServer(("", port), RendezvousHandler, 0)
    httpd.init(slots)
    threading.Thread(target=httpd.serve_forever, name="rendezvous", daemon=True).start()
    return httpd


def iface_toward(addr: str, port: int) -> str:
    """The network interface this host reaches ``addr`` through (``eth0`` in a pod,
    ``lo`` for 127.0.0.1): gloo announces that interface's address to its peers."""
    import psutil

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(addr), port))  # no packet is sent
        local = s.getsockname()[0]
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == local for a in addrs):
            return name
    return "eth0"


def wait_for_port(addr: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((addr, port), timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"[alchemist] Horovod's rendezvous on {addr}:{port} (pod 0) did not"
                    f" answer within {timeout:g} s"
                ) from None
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m alchemist.backends.horovod_pod")
    p.add_argument("job_dir")
    p.add_argument("--index", type=int, required=True, help="this pod's completion index")
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--procs", type=int, required=True, help="ranks per pod")
    p.add_argument("--addr", required=True, help="pod 0's address (the rendezvous)")
    p.add_argument("--master-port", type=int, required=True, help="the rendezvous port")
    p.add_argument("--iface", default=None, help="gloo's interface (default: toward --addr)")
    p.add_argument("--gpus", action="store_true", help="GPU operations over NCCL")
    args = p.parse_args(argv)

    iface = args.iface or iface_toward(args.addr, args.master_port)
    slots = plan(args.workers, args.procs)
    mine = [s for s in slots if s.hostname == host_name(args.index)]
    server = serve_rendezvous(args.master_port, slots) if args.index == 0 else None
    if server is None:
        wait_for_port(args.addr, args.master_port, RENDEZVOUS_WAIT_S)
    procs = [
        subprocess.Popen(
            [sys.executable, "-u", "-m", "alchemist.runtime", args.job_dir],
            env={**os.environ, **rank_env(s, args.addr, args.master_port, iface, args.gpus)},
        )
        for s in mine
    ]

    def forward(signum: int, frame: Any) -> None:  # the kubelet stops the pod: stop ranks
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [proc.wait() for proc in procs]
    if server is not None:
        time.sleep(LINGER_S)
        server.shutdown()
    return next((c for c in codes if c != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
