"""``alchemist session list|stop ID``: the interactive sessions from a terminal.

``list`` prints the user's sessions (jobs of kind ``session``), newest first, as
``alchemist jobs`` prints jobs; ``stop ID`` stops one as ``%alchemist_session stop``
does (its job ends ``succeeded``), from any process, e.g. after the kernel that started
it is gone. Running cells, pushing and promoting stay in the notebook.
"""

from __future__ import annotations

import argparse
import json
import sys

from alchemist.interactive.errors import SessionError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``session`` subcommand to the ``alchemist`` command's subparsers."""
    p = sub.add_parser("session", help="your interactive sessions: list (the default), stop ID")
    p.add_argument("action", nargs="?", default="list", choices=["list", "stop"])
    p.add_argument("session_id", nargs="?", default=None, help="the session to stop")
    p.add_argument("--state", default=None, help="list only sessions in this state")
    p.add_argument("--json", action="store_true", help="list as JSON")


def run(args: argparse.Namespace) -> int:
    """Run ``alchemist session ...``; the exit status.

    Raises:
        SessionError: ``stop`` without an id, or the id of a batch job.
        AlchemistError: no such job.
    """
    from alchemist import client
    from alchemist.console import format_jobs_table

    if args.action == "list":
        if args.session_id is not None:
            raise SessionError("alchemist session list takes no id (alchemist session stop ID)")
        listing = client.list_jobs(state=args.state)
        sessions = [j for j in listing.jobs if j.to_dict().get("kind") == "session"]
        if args.json:
            print(json.dumps([j.to_dict() for j in sessions], indent=2))
        else:
            none = "no sessions" + (f" {args.state}" if args.state else " yet")
            print(format_jobs_table(sessions) if sessions else none)
        return 0
    if args.session_id is None:
        raise SessionError("alchemist session stop needs the session's id (alchemist session list)")
    job = client.attach(args.session_id)
    if job.to_dict().get("kind") != "session":
        raise SessionError(
            f"job {job.id} is a batch job, not a session: alchemist cancel {job.id} stops it"
        )
    from alchemist.interactive.sessions import Session

    session = Session(job.job_dir)
    if not session.running():
        print(f"session {job.id} had already ended: {job.status().state.value}", file=sys.stderr)
        return 0
    session.stop()
    print(f"session {job.id} stopped")
    return 0
