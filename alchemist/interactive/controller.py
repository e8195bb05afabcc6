"""The session's ipyparallel controller: ``python -m alchemist.interactive.controller JOB_DIR``.

It listens on loopback only and writes its connection files into the session's
``session/ipython/security/`` (0600, in folders made 0700 before it starts): they hold
the key that signs every message, so only the session's owner can reach its engines.
The job directory on the command line lets the session's supervisor (and
``alchemist cancel``) find the controller by it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from alchemist.interactive.layout import SessionDir
from alchemist.jobdir import JobDir, make_private_dir


def controller_argv(sd: SessionDir) -> list[str]:
    return [
        f"--profile-dir={sd.profile}",
        "--ip=127.0.0.1",
        # Schedulers as threads, not seven more processes on a small machine.
        "--IPController.use_threads=True",
        # An engine joins at the hub's first heartbeat after it registers: at ipyparallel's
        # default period (3 s) that is most of a session's start. Beating every 0.5 s
        # with 60 misses allowed keeps the default 30 s before an engine is dropped (the
        # supervisor, not the heartbeat, notices dead engines).
        "--HeartMonitor.period=500",
        "--HeartMonitor.max_heartmonitor_misses=60",
        "--log-level=WARN",
    ]


def main(argv: list[str]) -> None:
    sd = SessionDir(JobDir(Path(argv[0])))
    make_private_dir(sd.security)
    from ipyparallel.controller.app import IPController

    IPController.launch_instance(argv=controller_argv(sd))


if __name__ == "__main__":
    main(sys.argv[1:])
