"""``horovodrun`` for a job on this machine alone: everything it opens on loopback.

``horovodrun`` (0.28) starts a rendezvous server, an HTTP key-value store where the
ranks' gloo contexts meet, and binds it to every interface of the machine
(``horovod.runner.util.network.find_port`` binds ``('', port)``), with no flag to say
otherwise; given only ``localhost`` it also picks the ranks' network interface itself.
A local job's rendezvous was thus reachable from other machines, against what the
local backend promises (``docs/architecture.md``: a local job listens on loopback
only). This module is the local backend's ``horovodrun``: the same command line
(``python -m alchemist.backends.horovod_loopback ARGS``, ``ARGS`` as ``horovodrun``'s),
the rendezvous bound to ``127.0.0.1`` and the ranks on the ``lo`` interface
(:data:`LOOPBACK_ARGS`, added by :func:`alchemist.backends.horovod_launch.horovod_argv`).
Jobs that span machines (Kubernetes) run the real ``horovodrun``.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from typing import Any

#: Where the rendezvous listens.
LOOPBACK = "127.0.0.1"
#: What the local backend adds to horovodrun's arguments: the ranks' gloo interface.
LOOPBACK_ARGS = ("--network-interfaces", "lo")
_MIN_PORT, _MAX_PORT = 1024, 65536


def find_loopback_port(server_factory: Callable[[tuple[str, int]], Any]) -> tuple[Any, int]:
    """What ``horovod.runner.util.network.find_port`` does, on loopback: the first port
    from a random start that a server can bind."""
    span = _MAX_PORT - _MIN_PORT
    start = random.randrange(span)
    for offset in range(span):
        port = _MIN_PORT + (start + offset) % span
        try:
            return server_factory((LOOPBACK, port)), port
        except OSError:
            continue
    raise RuntimeError("no free port on loopback for Horovod's rendezvous")


def main(argv: list[str]) -> None:
    from horovod.runner import launch
    from horovod.runner.http import http_server

    http_server.find_port = find_loopback_port
    sys.argv = ["horovodrun", *argv]
    launch.run_commandline()


if __name__ == "__main__":
    main(sys.argv[1:])
