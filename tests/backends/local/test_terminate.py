"""Stopping a job's processes treats a zombie as ended, whoever must reap it.

A rank's helper (its TensorBoard writer) outlives the rank by a moment; once it exits
it is an orphan's zombie that only init reaps, when init likes. Waiting for that zombie
to vanish held every cancel for seconds.
"""

from __future__ import annotations

import subprocess
import time

import psutil

from alchemist.backends.local.procs import _wait_ended, terminate


def test_a_zombie_that_another_process_must_reap_counts_as_ended() -> None:
    # `sleep 0` becomes a child of the exec'd `sleep 30`, which never reaps it.
    parent = subprocess.Popen(["sh", "-c", "sleep 0 & exec sleep 30"])
    try:
        deadline = time.monotonic() + 10
        while True:
            kids = psutil.Process(parent.pid).children()
            if kids and kids[0].status() == psutil.STATUS_ZOMBIE:
                break
            assert time.monotonic() < deadline, "no zombie appeared"
            time.sleep(0.01)
        zombie = kids[0]
        assert _wait_ended([zombie], timeout=0) == []  # psutil.wait_procs: still "alive"
        terminate([zombie], grace=60)  # returns once it has ended, not after the grace
        assert zombie.status() == psutil.STATUS_ZOMBIE  # still unreaped, and that is fine
    finally:
        parent.kill()
        parent.wait()
