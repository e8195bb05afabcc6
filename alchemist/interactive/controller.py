"""The session's ipyparallel controller: ``python -m alchemist.interactive.controller JOB_DIR``.

On one machine it listens on loopback only; on Kubernetes it runs in rank 0's pod and
listens there (``--location``: the pod's name that the other pods and the notebook
dial; the namespace's NetworkPolicy admits only the user's own pods). It writes its
connection files into the session's ``session/ipython/security/`` (0600, in folders
made 0700 before it starts): they hold the key that signs every message, so only the
session's owner can reach its engines.
The job directory on the command line lets the session's supervisor (and
``alchemist cancel``) find the controller by it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from alchemist.job.jobdir import JobDir, make_private_dir
from alchemist.job.session import SessionDir


def controller_argv(sd: SessionDir, location: str | None = None) -> list[str]:
    """The controller's flags: on loopback, or, given the ``location`` that engines and
    the notebook dial (rank 0's pod name under the headless Service), on every interface
    of rank 0's pod."""
    where = ["--ip=127.0.0.1"] if location is None else ["--ip=*", f"--location={location}"]
    return [
        f"--profile-dir={sd.profile}",
        *where,
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
    """``JOB_DIR [--location=HOST]`` (see :func:`controller_argv`)."""
    sd = SessionDir(JobDir(Path(argv[0])))
    location = next((a.split("=", 1)[1] for a in argv[1:] if a.startswith("--location=")), None)
    make_private_dir(sd.security)
    from ipyparallel.controller.app import IPController

    IPController.launch_instance(argv=controller_argv(sd, location))


if __name__ == "__main__":
    main(sys.argv[1:])
