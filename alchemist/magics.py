"""IPython magics: a thin ``magic_arguments`` layer over :mod:`alchemist.client`.

``%load_ext alchemist`` registers:

- ``%%alchemist_distributed [flags]``: run the cell as a distributed job;
- ``%%alchemist_sweep --param NAME=VALUES --objective METRIC [flags]``: run the cell once
  per setting, each trial a job (:mod:`alchemist.sweep`); ``%alchemist_sweep list |
  attach ID | cancel ID | resume ID``;
- ``%alchemist_jobs``, ``%alchemist_attach ID``, ``%alchemist_logs ID [--rank R] [--follow]``,
  ``%alchemist_cancel ID``, ``%alchemist_tensorboard ID``, ``%alchemist_diagnose ID``.

Every user mistake (a bad flag, a syntax error in the cell, an unpicklable variable,
an unknown job) is one ``UsageError`` line; nothing is submitted.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import sys
from argparse import ArgumentTypeError
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from alchemist import client
from alchemist.console import DEFAULT_MAX_LINES, LogFollower, format_jobs_table, status_line
from alchemist.errors import AlchemistError, CursorError
from alchemist.job.options import argument_specs, options_from_args, parse_names
from alchemist.job.spec import JobState, JobStatus


def _job_option_arguments(func: Any) -> Any:
    """The job option flags of :data:`alchemist.job.options.JOB_OPTIONS` (``magic``)."""
    # magic_arguments builds the parser from the last decorator applied to the first:
    # apply in reverse so that --help lists the options in the table's order.
    for flags, kwargs in reversed(argument_specs("magic")):
        func = argument(*flags, **kwargs)(func)
    return func


def _in_widget_frontend() -> bool:
    """True in a Jupyter kernel (a frontend that can render widgets)."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"
    except Exception:  # pragma: no cover
        return False


def _parse(magic: Any, line: str) -> Any:
    """The magic's flags; a line that cannot be split (an unclosed quote) is one
    ``UsageError`` line, like every other flag mistake (argparse's own are already)."""
    try:
        return parse_argstring(magic, line)
    except ValueError as e:
        name = getattr(magic, "__name__", "magic")
        raise UsageError(f"%{name}: cannot read the line ({e}): check its quotes") from None


#: A cell that is one ``%run SCRIPT.py [ARGS]`` line (no ``%run`` options).
_RUN_LINE = re.compile(r"\s*%run\s+(?!-)(\S+\.py)((?:\s.*)?)\s*")


def _run_script(cell: str) -> tuple[Path, list[str]] | None:
    """``(script, its arguments)`` for a distributed cell that is one ``%run script.py
    ARGS`` line: the script runs as the job, as ``alchemist submit script.py -- ARGS``."""
    lines = [ln for ln in cell.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if len(lines) != 1:
        return None
    m = _RUN_LINE.fullmatch(lines[0])
    if m is None:
        return None
    try:
        script_args = shlex.split(m.group(2))
    except ValueError as e:
        raise UsageError(f"%run {m.group(1)}: its arguments cannot be read ({e})") from None
    return Path(m.group(1)).expanduser(), script_args


def _positive_int(raw: str) -> int:
    """An argparse type: a whole number of 1 or more."""
    try:
        value = int(raw)
    except ValueError:
        raise ArgumentTypeError(f"expected a whole number, got {raw!r}") from None
    if value < 1:
        raise ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


@magics_class
class AlchemistMagics(Magics):
    """The Alchemist magics."""

    @magic_arguments()
    @_job_option_arguments
    @argument("--detach", action="store_true", help="return at once with a job handle")
    @argument("--dry-run", action="store_true", help="print what would run; submit nothing")
    @argument(
        "--max-output-lines",
        type=_positive_int,
        default=DEFAULT_MAX_LINES,
        help="lines shown in the cell (1 or more)",
    )
    @argument("--no-widget", action="store_true", help="plain text output instead of the monitor")
    @cell_magic
    def alchemist_distributed(self, line: str, cell: str) -> Any:
        """Run this cell as a distributed training job."""
        prepared = self._submit_cell(line, cell)
        if not isinstance(prepared, tuple):
            return prepared
        job, args = prepared
        status = self._watch(job, args.max_output_lines, use_widget=not args.no_widget)
        return self._finish_cell(job, args, status)

    async def alchemist_distributed_async(self, line: str, cell: str) -> Any:
        """``%%alchemist_distributed`` for an awaiting cell (see :func:`run_async`)."""
        prepared = self._submit_cell(line, cell)
        if not isinstance(prepared, tuple):
            return prepared
        job, args = prepared
        status = await self._watch_async(job, args.max_output_lines, not args.no_widget)
        return self._finish_cell(job, args, status)

    def _submit_cell(self, line: str, cell: str) -> Any:
        """Submit the cell: ``(job, args)`` to watch, or what the magic returns at once."""
        args = _parse(self.alchemist_distributed, line)
        try:
            options = options_from_args(args, "magic")
        except AlchemistError as e:
            raise UsageError(str(e)) from None
        script = _run_script(cell)
        try:
            if script is not None:  # `%run train.py ARGS`: the script is the job
                path, script_args = script
                result = client.submit(path, args=script_args, dry_run=args.dry_run, **options)
            else:
                result = client.submit(
                    cell, namespace=self._user_ns(), dry_run=args.dry_run, **options
                )
        except AlchemistError as e:
            raise UsageError(str(e)) from None
        if args.dry_run:
            print(result.text)
            return None
        job: client.Job = result
        for warning in job.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        if args.detach:
            print(
                f"job {job.id} ({job.name}) submitted; follow it with %alchemist_attach {job.id},"
                f" stop it with %alchemist_cancel {job.id}"
            )
            return job
        return job, args

    def _finish_cell(self, job: client.Job, args: Any, status: JobStatus) -> None:
        """Copy the outputs back after a success; a failure is one error line."""
        outputs = parse_names(args.outputs)
        if status.state == JobState.SUCCEEDED and outputs:
            values = job.outputs()
            self._user_ns().update(values)
            if values:
                print(f"copied back from rank 0: {', '.join(values)}")
            missing = [name for name in outputs if name not in values]
            if missing:
                print(
                    f"not copied back: {', '.join(missing)} (rank 0 had no such value, or it"
                    f" could not be pickled; see %alchemist_logs {job.id} --rank 0)",
                    file=sys.stderr,
                )
        if status.state == JobState.FAILED:
            raise UsageError(status_line(job, status) + f" (full logs: %alchemist_logs {job.id})")
        return None

    def _user_ns(self) -> dict[str, Any]:
        assert self.shell is not None  # magics are only called from a shell
        ns: dict[str, Any] = self.shell.user_ns
        return ns

    def _watch(self, job: client.Job, max_lines: int, use_widget: bool = True) -> Any:
        """Show the job until it ends; Ctrl-C (interrupt) cancels it and says so."""
        monitor, follower = _viewers(job, max_lines, use_widget)
        try:
            status = monitor.follow() if monitor is not None else follower.follow()
        except KeyboardInterrupt:
            return _interrupted(job, monitor)
        return _ended(job, status, monitor, follower)

    async def _watch_async(self, job: client.Job, max_lines: int, use_widget: bool) -> Any:
        """:meth:`_watch` for an awaiting cell: the kernel handles the monitor's buttons.

        An interrupt reaches an awaiting cell as ``CancelledError`` at its next await.
        """
        monitor, follower = _viewers(job, max_lines, use_widget)
        try:
            if monitor is not None:
                status = await monitor.follow_async()
            else:
                status = await follower.follow_async()
        except (KeyboardInterrupt, asyncio.CancelledError):
            return _interrupted(job, monitor)
        return _ended(job, status, monitor, follower)

    # -- sweeps --------------------------------------------------------------------------
    @magic_arguments()
    @_job_option_arguments
    @argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=VALUES",
        help="a variable the cell sets, and its values: lr=0.1,0.01 | bs=range(16,65,16) |"
        " lr=loguniform(1e-4,1e-1) | p=uniform(0,1) | width=int(32,512) (repeat for each)",
    )
    @argument("--objective", default=None, help="the metric (alchemist.log keyword) to optimise")
    @argument("--mode", default="max", help="max or min (default max)")
    @argument("--sampler", default=None, help="grid | random | tpe (default: grid for lists)")
    @argument("--pruner", default="median", help="median | halving | hyperband | none")
    @argument("--trials", type=_positive_int, default=None, help="trials to run (default: grid)")
    @argument("--parallel", type=_positive_int, default=1, help="trials at once (default 1)")
    @argument("--prune-after", type=int, default=None, help="finished trials before pruning")
    @argument("--prune-warmup", type=int, default=0, help="steps before a trial may be pruned")
    @argument("--seed", type=int, default=None, help="the sampler's seed")
    @argument("--detach", action="store_true", help="return at once with a sweep handle")
    @argument("--dry-run", action="store_true", help="print what would run; start nothing")
    @argument("--no-widget", action="store_true", help="plain text output instead of the chart")
    @cell_magic("alchemist_sweep")  # type: ignore[arg-type]  # IPython types the named form loosely
    def alchemist_sweep_cell(self, line: str, cell: str) -> Any:
        """Run this cell once per setting of its swept variables, each trial a job."""
        prepared = self._start_sweep(line, cell)
        if not isinstance(prepared, tuple):
            return prepared
        sweep, args = prepared
        monitor = _sweep_monitor(sweep, not args.no_widget)
        try:
            state = monitor.follow() if monitor is not None else _follow_sweep_text(sweep)
        except KeyboardInterrupt:
            return _sweep_interrupted(sweep, monitor)
        return self._finish_sweep(sweep, args, state)

    async def alchemist_sweep_async(self, line: str, cell: str) -> Any:
        """``%%alchemist_sweep`` for an awaiting cell (see :func:`run_async`)."""
        prepared = self._start_sweep(line, cell)
        if not isinstance(prepared, tuple):
            return prepared
        sweep, args = prepared
        monitor = _sweep_monitor(sweep, not args.no_widget)
        try:
            if monitor is not None:
                state = await monitor.follow_async()
            else:
                state = await asyncio.to_thread(_follow_sweep_text, sweep)
        except (KeyboardInterrupt, asyncio.CancelledError):
            return _sweep_interrupted(sweep, monitor)
        return self._finish_sweep(sweep, args, state)

    def _start_sweep(self, line: str, cell: str) -> Any:
        from alchemist.sweep import api as sweeps

        args = _parse(self.alchemist_sweep_cell, line)
        if not args.objective:
            raise UsageError(
                "%%alchemist_sweep needs --objective METRIC: the value the cell logs with"
                " alchemist.log(step, METRIC=...) that judges each trial"
            )
        try:
            options = options_from_args(args, "magic")
            result = sweeps.start(
                cell,
                args.param,
                args.objective,
                namespace=self._user_ns(),
                mode=args.mode,
                sampler=args.sampler,
                pruner=args.pruner,
                trials=args.trials,
                parallel=args.parallel,
                prune_after=args.prune_after,
                prune_warmup=args.prune_warmup,
                seed=args.seed,
                dry_run=args.dry_run,
                **options,
            )
        except AlchemistError as e:
            raise UsageError(str(e)) from None
        if args.dry_run:
            print(result.text)
            return None
        if args.detach:
            print(
                f"sweep {result.id} ({result.name}) started: follow it with %alchemist_sweep"
                f" attach {result.id}, stop it with %alchemist_sweep cancel {result.id}"
            )
            return result
        return result, args

    def _finish_sweep(self, sweep: Any, args: Any, state: dict[str, Any]) -> Any:
        """Say the best setting, copy the best trial's outputs back; a failure is one line."""
        from alchemist.sweep.text import best_line

        best = sweep.best()
        print(best_line(best, sweep.spec.objective))
        outputs = parse_names(getattr(args, "outputs", None))
        if best is not None and outputs and state["state"] == "succeeded":
            values = sweep.outputs()
            self._user_ns().update(values)
            if values:
                print(f"copied back from the best trial: {', '.join(values)}")
        if state["state"] in ("failed", "cancelled") or (
            state["state"] == "running" and not state.get("driver", True)
        ):
            raise UsageError(f"sweep {sweep.id} {state['state']}: {state.get('reason')}")
        return sweep

    @line_magic("alchemist_sweep")  # type: ignore[arg-type]
    def alchemist_sweep_line(self, line: str) -> Any:
        """``%alchemist_sweep attach ID | list | cancel ID | resume ID``."""
        from alchemist.sweep import api as sweeps

        words = line.split()
        usage = "%alchemist_sweep list | attach ID | cancel ID | resume ID (run a sweep: %%alchemist_sweep)"
        if not words or words[0] not in ("list", "attach", "cancel", "resume"):
            raise UsageError(f"usage: {usage}")
        if words[0] == "list":
            from alchemist.sweep.text import format_sweeps_table

            found = sweeps.sweeps()
            print(
                format_sweeps_table(found)
                if found
                else "no sweeps yet (run one with %%alchemist_sweep)"
            )
            return None
        if len(words) != 2:
            raise UsageError(f"usage: {usage}")
        try:
            sweep = sweeps.attach(words[1])
        except AlchemistError as e:
            raise UsageError(str(e)) from None
        if words[0] == "cancel":
            sweep.cancel()
            print(f"sweep {sweep.id}: {sweep.state()['state']}")
            return None
        if words[0] == "resume" or not sweep.state()["driver"]:
            if sweep.resume():
                print(f"sweep {sweep.id}: its driver was not running; resumed")
            elif words[0] == "resume":
                print(f"sweep {sweep.id} is {sweep.state()['state']}; nothing to resume")
        monitor = _sweep_monitor(sweep, True)
        if monitor is None:
            _follow_sweep_text(sweep)
        else:
            try:
                monitor.follow()
            except KeyboardInterrupt:
                pass  # stop watching; the sweep goes on
        return sweep

    # -- line magics ---------------------------------------------------------------------
    @magic_arguments()
    @argument("--state", default=None, help="only jobs in this state")
    @argument("--limit", type=int, default=20, help="at most this many (default 20)")
    @argument("--before", default=None, help="the page after this cursor (printed last)")
    @line_magic
    def alchemist_jobs(self, line: str) -> None:
        """List your jobs, newest first, a page at a time."""
        args = _parse(self.alchemist_jobs, line)
        states = [s.value for s in JobState]
        if args.state is not None and args.state not in states:
            raise UsageError(f"--state must be one of {', '.join(states)}, got {args.state!r}")
        if args.limit < 1:
            raise UsageError(f"--limit must be at least 1, got {args.limit}")
        try:
            listing = client.list_jobs(state=args.state, limit=args.limit, before=args.before)
        except CursorError as e:
            raise UsageError(str(e)) from None
        print(format_jobs_table(listing.jobs))
        if listing.next:
            print(f"(older jobs: %alchemist_jobs --before {listing.next})")
        for job_id, why in listing.skipped:
            print(f"(job {job_id} could not be read and is not listed: {why})")

    @magic_arguments()
    @argument("job_id", help="the job's id")
    @argument("--no-widget", action="store_true", help="plain text output instead of the monitor")
    @line_magic
    def alchemist_attach(self, line: str) -> Any:
        """Show a job's whole history and follow it while it runs (also after a kernel restart)."""
        args = _parse(self.alchemist_attach, line)
        job = self._attach(args.job_id)
        self._watch(job, DEFAULT_MAX_LINES, use_widget=not args.no_widget)
        return job

    async def alchemist_attach_async(self, line: str) -> Any:
        """``%alchemist_attach`` for an awaiting cell (see :func:`run_async`)."""
        args = _parse(self.alchemist_attach, line)
        job = self._attach(args.job_id)
        await self._watch_async(job, DEFAULT_MAX_LINES, not args.no_widget)
        return job

    @magic_arguments()
    @argument("job_id", help="the job's id")
    @argument("--rank", type=int, default=None, help="only this rank")
    @argument("--follow", action="store_true", help="keep printing until the job ends")
    @line_magic
    def alchemist_logs(self, line: str) -> None:
        """Print a job's logs (every rank, or one)."""
        args = _parse(self.alchemist_logs, line)
        job = self._attach(args.job_id)
        if args.rank is not None and not 0 <= args.rank < job.spec.world_size:
            raise UsageError(f"--rank must be between 0 and {job.spec.world_size - 1}")
        ranks = [args.rank] if args.rank is not None else None
        follower = LogFollower(job, print, max_lines=sys.maxsize, ranks=ranks)
        try:
            follower.follow(until_terminal=args.follow)
        except KeyboardInterrupt:
            pass  # stop following; the job goes on

    @magic_arguments()
    @argument("job_id", help="the job's id")
    @line_magic
    def alchemist_cancel(self, line: str) -> None:
        """Cancel a job (stops every worker; a finished job is left as it is)."""
        args = _parse(self.alchemist_cancel, line)
        job = self._attach(args.job_id)
        before = job.status().state
        job.cancel()
        if before.is_terminal:
            print(f"job {job.id} had already {before.value}; nothing to cancel")
        else:
            print(status_line(job, job.status()))

    @magic_arguments()
    @argument("job_id", help="the job's id")
    @argument("--json", action="store_true", help="print the whole report as JSON")
    @argument(
        "--bundle",
        default=None,
        metavar="PATH",
        help="also write the debug bundle (.tar.gz) to PATH (a folder: alchemist-ID-debug.tar.gz)",
    )
    @line_magic
    def alchemist_diagnose(self, line: str) -> None:
        """Which rank is stuck, and where: a running job's ranks, their steps and stacks."""
        args = _parse(self.alchemist_diagnose, line)
        job = self._attach(args.job_id)
        from alchemist.diagnosis.report import format_report

        report = job.diagnose()
        print(json.dumps(report, indent=2) if args.json else format_report(report))
        if args.bundle is not None:
            from pathlib import Path

            from alchemist.diagnosis.bundle import save_bundle

            try:
                where = save_bundle(job.job_dir, report, Path(args.bundle))
            except AlchemistError as e:
                raise UsageError(str(e)) from None
            print(f"debug bundle written to {where}")

    @magic_arguments()
    @argument("job_id", help="the job's id")
    @line_magic
    def alchemist_tensorboard(self, line: str) -> Any:
        """Start (or reuse) TensorBoard on a job (or a sweep: its HParams view) and show
        where to open it."""
        args = _parse(self.alchemist_tensorboard, line)
        from alchemist.tensorboard import open_tensorboard

        if args.job_id.startswith("w"):  # a sweep: its trials' settings and results
            from alchemist.sweep import api as sweeps

            try:
                handle = open_tensorboard(sweeps.attach(args.job_id).dir.root)
            except AlchemistError as e:
                raise UsageError(str(e)) from None
            print(f"TensorBoard for sweep {args.job_id} (HParams tab): {handle.url}")
            return handle
        job = self._attach(args.job_id)
        try:
            handle = open_tensorboard(job)
        except AlchemistError as e:
            raise UsageError(str(e)) from None
        print(f"TensorBoard for job {job.id}: {handle.url}")
        return handle

    def _attach(self, job_id: str) -> client.Job:
        try:
            return client.attach(job_id)
        except AlchemistError as e:
            raise UsageError(str(e)) from None


def _make_monitor(job: client.Job) -> Any:
    """The live monitor widget, or None where it cannot be built."""
    try:
        from alchemist.widgets import JobMonitor
    except ImportError:
        return None
    monitor = JobMonitor(job)
    monitor.display()
    return monitor


def _viewers(job: client.Job, max_lines: int, use_widget: bool) -> tuple[Any, LogFollower]:
    """The live monitor (None where widgets cannot show) and the text follower of a job."""
    monitor = _make_monitor(job) if use_widget and _in_widget_frontend() else None
    return monitor, LogFollower(job, print, max_lines=max_lines)


def _sweep_monitor(sweep: Any, use_widget: bool) -> Any:
    """The live sweep widget, shown; None where widgets cannot show."""
    if not (use_widget and _in_widget_frontend()):
        return None
    from alchemist.widgets.sweep import SweepMonitor

    monitor = SweepMonitor(sweep)
    monitor.display()
    return monitor


def _follow_sweep_text(sweep: Any, poll: float = 1.0) -> dict[str, Any]:
    """Print a line as each trial starts and ends, until the sweep ends."""
    import time

    from alchemist.sweep.text import LIVE_STATES, setting
    from alchemist.widgets.sweep import SweepData

    data = SweepData(sweep)
    said: dict[int, str] = {}
    print(
        f"sweep {sweep.id} ({sweep.name}): {sweep.spec.trials} trials, {sweep.spec.parallel} at once"
    )
    while True:
        data.poll()
        for t in data.view["trials"]:
            state = "running" if t["state"] in LIVE_STATES else t["state"]
            if state == "waiting" or said.get(t["number"]) == state:
                continue
            said[t["number"]] = state
            value = "" if t.get("value") is None else f" {sweep.spec.objective}={t['value']:.4g}"
            why = f": {t['reason']}" if t.get("reason") and state != "complete" else ""
            print(f"trial {t['number']} ({setting(t['params'])}) {state}{value}{why}")
        if data.finished:
            return data.state
        time.sleep(poll)


def _sweep_interrupted(sweep: Any, monitor: Any) -> dict[str, Any]:
    sweep.cancel()
    if monitor is not None:
        monitor.update()
    print(f"interrupted: sweep {sweep.id} cancelled", file=sys.stderr)
    return dict(sweep.state())


def _interrupted(job: client.Job, monitor: Any) -> JobStatus:
    """Cancel the job of an interrupted cell, show it, and say so."""
    job.cancel()
    if monitor is not None:
        monitor.update()
    print(f"interrupted: job {job.id} cancelled", file=sys.stderr)
    return job.status()


def _ended(job: client.Job, status: JobStatus, monitor: Any, follower: LogFollower) -> JobStatus:
    """The text view's last lines (the monitor shows the end itself); ``status``."""
    if monitor is None:
        summary = follower.summary()
        if summary:
            print(summary)
        print(status_line(job, status))
    return status


# -- keeping the kernel responsive while a job runs ---------------------------------------
#
# A magic is a plain function call: while ``%%alchemist_distributed`` follows its job the
# kernel's event loop is blocked, and the monitor's buttons (Cancel, TensorBoard) would
# answer only after the cell. A cell that *awaits* leaves the loop free, and ipykernel
# (7.4+) dispatches widget messages while an async cell waits. So in a Jupyter kernel a
# post-input transformer rewrites a top-level ``%%alchemist_distributed`` cell, and a
# top-level ``%alchemist_attach`` line, into an awaited call of the magic's async twin.
# Everything else (flags, errors, outputs, the interrupt cancelling the job) is the same
# code as the synchronous magic, which still runs wherever the rewrite does not apply
# (a terminal IPython, an indented line, another event-loop runner).

_CELL_MAGIC = re.compile(
    r"^get_ipython\(\)\.run_cell_magic\('(alchemist_distributed|alchemist_sweep)', (.*)\)\n?$"
)
_LINE_MAGIC = re.compile(
    r"^(?P<lhs>[A-Za-z_][\w.]*\s*=\s*)?"
    r"get_ipython\(\)\.run_line_magic\('alchemist_attach', (?P<arg>.*)\)(?P<end>\s*)$"
)
_RUN_ASYNC = "await __import__('alchemist.magics', fromlist=['run_async']).run_async"


async def run_async(magic: str, line: str, cell: str | None = None) -> Any:
    """Run an Alchemist magic as an awaiting cell (the rewritten cells call this)."""
    from IPython import get_ipython

    shell = get_ipython()
    magics = shell.magics_manager.registry["AlchemistMagics"]
    line = shell.var_expand(line, 1)
    if magic == "alchemist_distributed":
        return await magics.alchemist_distributed_async(line, cell or "")
    if magic == "alchemist_sweep":
        return await magics.alchemist_sweep_async(line, cell or "")
    return await magics.alchemist_attach_async(line)


def _awaiting_runner(shell: Any) -> bool:
    """True where an awaiting cell runs on the kernel's own asyncio loop."""
    try:
        from IPython.core.async_helpers import _asyncio_runner
    except ImportError:  # pragma: no cover
        return False
    return (
        _in_widget_frontend()
        and getattr(shell, "autoawait", False)
        and getattr(shell, "loop_runner", None) is _asyncio_runner
    )


def await_alchemist_magics(lines: list[str]) -> list[str]:
    """IPython post-input transformer: await the following magics (see above)."""
    from IPython import get_ipython

    if not _awaiting_runner(get_ipython()):
        return lines
    if len(lines) == 1 and (m := _CELL_MAGIC.match(lines[0])):
        return [f"{_RUN_ASYNC}('{m.group(1)}', {m.group(2)})\n"]
    out = []
    for text in lines:
        m = _LINE_MAGIC.match(text)
        if m is None:
            out.append(text)
            continue
        lhs = m.group("lhs") or ""
        out.append(f"{lhs}{_RUN_ASYNC}('alchemist_attach', {m.group('arg')}){m.group('end')}")
    return out


def load_ipython_extension(ipython: Any) -> None:
    from alchemist.interactive import magics as interactive_magics

    ipython.register_magics(AlchemistMagics)
    interactive_magics.register(ipython)
    transformers = ipython.input_transformers_post
    if await_alchemist_magics not in transformers:
        transformers.append(await_alchemist_magics)
