"""The ``alchemist`` command: jobs, logs, metrics, cancel, submit, status, diagnose, pool,
sweep.

``alchemist submit train.py -n 2`` runs a script (or a notebook's code cells) as a job
through the same :func:`alchemist.client.submit` as the magic, and follows its logs
unless ``--detach``. Errors a user can fix print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from alchemist import client
from alchemist.console import LogFollower, format_jobs_table, status_line
from alchemist.diagnosis.report import format_report
from alchemist.errors import AlchemistError
from alchemist.job.options import add_arguments, options_from_args
from alchemist.job.spec import JobState


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="alchemist", description="Alchemist distributed training jobs")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser(
        "submit",
        help="run a .py script or .ipynb notebook as a job (the script's own arguments"
        " after --, as under torchrun)",
    )
    s.add_argument("file", type=Path)
    add_arguments(s, "cli")
    s.add_argument("--detach", action="store_true", help="print the job id and return")
    s.add_argument("--dry-run", action="store_true", help="print what would run; submit nothing")

    j = sub.add_parser("jobs", help="list your jobs, newest first")
    j.add_argument("--state", default=None, choices=[s.value for s in JobState])
    j.add_argument("--limit", type=_positive, default=20, help="at most this many (default 20)")
    j.add_argument("--before", default=None, help="the page after this cursor (printed last)")
    j.add_argument("--json", action="store_true")

    pr = sub.add_parser(
        "prune", help="remove your finished jobs older than an age or beyond a count"
    )
    pr.add_argument("--older-than", default=None, help="ended longer ago than this (30d, 12h)")
    pr.add_argument("--keep", type=_positive, default=None, help="keep the newest N jobs")
    pr.add_argument("--yes", action="store_true", help="remove them (without: a dry run)")

    for name, help_ in (("status", "show a job"), ("cancel", "cancel a job")):
        c = sub.add_parser(name, help=help_)
        c.add_argument("job_id")

    d = sub.add_parser("diagnose", help="which rank is stuck, and where (a running job)")
    d.add_argument("job_id")
    d.add_argument("--json", action="store_true", help="print the whole report as JSON")
    d.add_argument(
        "--bundle",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write the debug bundle (.tar.gz: the report, stacks, flight recorder,"
        " log tails, spec) to PATH (a folder: alchemist-ID-debug.tar.gz in it); the"
        " job's --env values are replaced by <redacted: env NAME>",
    )
    d.add_argument(
        "--bundle-with-env",
        action="store_true",
        help="keep the job's --env values in the debug bundle (they are often keys:"
        " share such a bundle with care)",
    )

    pl = sub.add_parser(
        "pool", help="your warm pool of local ranks: status (the default), or stop it"
    )
    pl.add_argument("action", nargs="?", default="status", choices=["status", "stop"])
    pl.add_argument("--json", action="store_true", help="print the status as JSON")

    from alchemist.interactive import commands as session_commands

    session_commands.add_parser(sub)

    sw = sub.add_parser(
        "sweep", help="your sweeps (a cell run once per setting): list, show, cancel, resume"
    )
    sws = sw.add_subparsers(dest="sweep_command", required=True)
    swl = sws.add_parser("list", help="list your sweeps, newest first")
    swl.add_argument("--json", action="store_true", help="print each sweep's summary as JSON")
    sw_show = sws.add_parser("show", help="a sweep's definition and its trials, best first")
    sw_show.add_argument("sweep_id")
    sw_show.add_argument("--json", action="store_true", help="print the whole sweep as JSON")
    sws.add_parser("cancel", help="cancel a sweep and its running trials").add_argument("sweep_id")
    sws.add_parser(
        "resume", help="start a running sweep's driver again (after a machine restart)"
    ).add_argument("sweep_id")

    lg = sub.add_parser("logs", help="print a job's logs")
    lg.add_argument("job_id")
    lg.add_argument("--rank", type=int, default=None)
    lg.add_argument("-f", "--follow", action="store_true")

    m = sub.add_parser("metrics", help="print a job's metric events (JSON lines)")
    m.add_argument("job_id")
    m.add_argument(
        "--since",
        default=None,
        metavar="CURSOR",
        help="print only events after this cursor (what --cursor printed last time)",
    )
    m.add_argument(
        "--cursor",
        action="store_true",
        help="print the cursor to continue from on stderr, after the events",
    )
    m.add_argument(
        "--system",
        action="store_true",
        help="the system metrics each rank recorded (CPU, memory, GPU) instead of what the"
        " code logged with alchemist.log",
    )
    return p


def _split_script_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """``submit train.py -n 2 -- --lr 0.1``: the script's own arguments come after ``--``."""
    if argv[:1] == ["submit"] and "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    ours, script_args = _split_script_args(list(sys.argv[1:] if argv is None else argv))
    parser = _parser()
    args, unknown = parser.parse_known_args(ours)
    if unknown and args.command == "submit":
        # `alchemist submit train.py --lr 0.1`: the script's own arguments, without `--`
        parser.exit(
            2,
            f"alchemist submit: error: unrecognized arguments: {' '.join(unknown)}; a"
            " script's own arguments go after --, as with torchrun:"
            f" alchemist submit {args.file} [OPTIONS] -- {' '.join(unknown)}\n",
        )
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.script_args = script_args
    try:
        code = _run(args)
        sys.stdout.flush()  # inside the try: a reader that left is seen here
        return code
    except AlchemistError as e:
        print(f"alchemist: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `alchemist logs J | head`: the reader left; not an error
        # Point stdout at devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _prune(args: argparse.Namespace) -> int:
    from alchemist import retention
    from alchemist.bundle.sizes import human_size

    older = None if args.older_than is None else retention.parse_duration(args.older_than)
    found = retention.plan(older_than=older, keep=args.keep)
    if not found.jobs:
        print("nothing to prune", file=sys.stderr)
        return 0
    if not args.yes:
        for record in found.jobs[:20]:
            print(f"{record.id}  {record.name}  {record.state}")
        if len(found.jobs) > 20:
            print(f"... and {len(found.jobs) - 20} more")
        print(
            f"alchemist: would remove {len(found.jobs)} finished jobs"
            f" ({human_size(found.bytes)}): run again with --yes to remove them",
            file=sys.stderr,
        )
        return 0
    removed, freed = retention.prune(found.jobs)
    print(f"removed {removed} jobs, {human_size(freed)} freed", file=sys.stderr)
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.command == "submit":
        options = options_from_args(args, "cli")
        if not options["name"]:
            del options["name"]  # the job is named after the file
        result = client.submit(
            args.file, dry_run=args.dry_run, args=args.script_args or None, **options
        )
        if args.dry_run:
            print(result.text)
            return 0
        job = result
        for warning in job.warnings:
            print(f"alchemist: warning: {warning}", file=sys.stderr)
        print(f"job {job.id} ({job.name}) submitted", file=sys.stderr)
        folder = args.file.resolve().parent
        if folder != Path.cwd().resolve():  # unlike torchrun, which stays where it is
            print(
                f"alchemist: it runs in {folder}, the script's folder: its relative paths"
                " are read from there",
                file=sys.stderr,
            )
        if args.detach:
            print(job.id)
            return 0
        try:
            status = LogFollower(job, print, max_lines=sys.maxsize).follow()
        except KeyboardInterrupt:
            job.cancel()
            print(f"interrupted: job {job.id} cancelled", file=sys.stderr)
            return 130
        print(status_line(job, status), file=sys.stderr)
        return 0 if status.state == JobState.SUCCEEDED else 1
    if args.command == "jobs":
        listing = client.list_jobs(state=args.state, limit=args.limit, before=args.before)
        if args.json:
            print(json.dumps([j.to_dict() for j in listing.jobs], indent=2))
        else:
            print(format_jobs_table(listing.jobs))
        if listing.next:
            print(f"alchemist: older jobs: alchemist jobs --before {listing.next}", file=sys.stderr)
        for job_id, why in listing.skipped:
            print(
                f"alchemist: job {job_id} could not be read and is not listed: {why}",
                file=sys.stderr,
            )
        return 0
    if args.command == "prune":
        return _prune(args)
    if args.command == "pool":
        return _pool(args)
    if args.command == "session":
        from alchemist.interactive import commands as session_commands

        return session_commands.run(args)
    if args.command == "sweep":
        return _sweep(args)
    job = client.attach(args.job_id)
    if args.command == "status":
        print(json.dumps(job.to_dict(), indent=2))
    elif args.command == "diagnose":
        report = job.diagnose()
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            print(format_report(report))
        if args.bundle is not None:
            from alchemist.diagnosis.bundle import save_bundle

            where = save_bundle(job.job_dir, report, args.bundle, with_env=args.bundle_with_env)
            print(f"debug bundle written to {where}", file=sys.stderr)
    elif args.command == "cancel":
        job.cancel()
        print(status_line(job, job.status()))
    elif args.command == "logs":
        ranks = [args.rank] if args.rank is not None else None
        try:
            LogFollower(job, print, max_lines=sys.maxsize, ranks=ranks).follow(
                until_terminal=args.follow
            )
        except KeyboardInterrupt:
            pass
    elif args.command == "metrics":
        events, cursor = job.metrics_chunk(since=args.since, system=args.system)
        for event in events:
            print(json.dumps(event))
        if not events and args.since is None:
            print(_no_metrics(job, args.system), file=sys.stderr)
        if args.cursor:
            print(f"cursor: {cursor}", file=sys.stderr)
    return 0


def _no_metrics(job: Any, system: bool) -> str:
    """One line on why ``alchemist metrics`` printed nothing, and what to do."""
    if system:
        return f"alchemist: job {job.id} has no system metrics (yet)"
    if job.metrics_chunk(system=True, max_bytes=1)[0]:
        return (
            f"alchemist: job {job.id} logged no metrics (its code calls no alchemist.log);"
            f" its system metrics (CPU, memory, GPU): alchemist metrics {job.id} --system"
        )
    return f"alchemist: job {job.id} has logged no metrics yet"


def _sweep(args: argparse.Namespace) -> int:
    """``alchemist sweep list|show|cancel|resume``: the sweeps of :mod:`alchemist.sweep`."""
    from alchemist.sweep import api as sweep_api
    from alchemist.sweep import text as sweep_text

    if args.sweep_command == "list":
        found = sweep_api.sweeps()
        if args.json:
            print(json.dumps([sweep_text.summary(s) for s in found], indent=2))
        else:
            print(sweep_text.format_sweeps_table(found))
        return 0
    sweep = sweep_api.attach(args.sweep_id)
    if args.sweep_command == "show":
        print(
            json.dumps(sweep.to_dict(), indent=2) if args.json else sweep_text.format_sweep(sweep)
        )
        return 0
    if args.sweep_command == "cancel":
        before = sweep.state()["state"]
        sweep.cancel()
        st = sweep.state()
        if before != "running":
            print(f"sweep {sweep.id} had already ended: {st['state']}")
        else:
            why = f": {st['reason']}" if st.get("reason") else ""
            print(f"sweep {sweep.id} {st['state']}{why}")
        return 0
    # resume
    if sweep.resume():
        print(f"sweep {sweep.id}: its driver started again; it goes on with its trials")
        return 0
    st = sweep.state()
    if st["state"] != "running":
        why = f"it has ended ({st['state']}" + (f": {st['reason']})" if st.get("reason") else ")")
    else:
        why = "its driver is already running"
    print(f"sweep {sweep.id} not resumed: {why}")
    return 0


def _pool(args: argparse.Namespace) -> int:
    from alchemist.backends.local.pool import client as pool_client
    from alchemist.backends.local.pool import state as pool_state

    if args.action == "stop":
        stopped = pool_client.stop()
        print("warm pool stopped" if stopped else "no warm pool is running")
        return 0
    status = pool_state.status()
    print(json.dumps(status, indent=2) if args.json else status["text"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
