"""The interactive mode's magics, thin parsers over :class:`~alchemist.interactive.Session`.

- ``%alchemist_session start -n 2 [--gpus-per-worker G] [--name N] [--idle-timeout S]
  [--collective-timeout S] [--start-timeout S] [--env K=V]``
- ``%alchemist_session status | stop | attach ID | restart [--replay 1,3]``
- ``%alchemist_session promote [--cells 1,3] [job flags] [--dry-run]``
- ``%%alchemist_px [--targets 0,2] [--no-stream]``: the cell runs on the session's ranks
- ``%alchemist_autopx``: every following cell runs as ``%%alchemist_px``, until toggled
- ``%alchemist_push NAME [NAME...]``: the notebook's values to every rank

A mistake (no session, one already running, unknown targets, a bad flag) is one
``UsageError`` line and starts nothing.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from alchemist.errors import AlchemistError
from alchemist.interactive import sessions as session_mod
from alchemist.interactive.errors import CellFailed, SessionError
from alchemist.job.options import add_arguments, options_from_args

_SUBCOMMANDS = ("start", "status", "stop", "restart", "promote", "attach")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # one line, never SystemExit
        raise UsageError(f"{self.prog}: {message}")


#: The job options a session's start takes (their flags and help from the one table).
SESSION_OPTIONS = ("workers", "gpus_per_worker", "name", "backend", "env", "no_warm")


def _start_parser() -> _Parser:
    p = _Parser(prog="%alchemist_session start", add_help=False)
    add_arguments(p, "magic", only=SESSION_OPTIONS)
    p.add_argument("--idle-timeout", type=_seconds, default=None)
    p.add_argument(
        "--collective-timeout", type=_seconds, default=session_mod.DEFAULT_COLLECTIVE_TIMEOUT_S
    )
    p.add_argument("--start-timeout", type=_seconds, default=session_mod.DEFAULT_START_TIMEOUT_S)
    return p


def _promote_parser() -> _Parser:
    p = _Parser(prog="%alchemist_session promote", add_help=False)
    add_arguments(p, "magic")
    for a in p._actions:  # the session's sizes unless given
        if a.dest in ("workers", "name", "gpus_per_worker"):
            a.default = None
    p.add_argument(
        "--cells", default=None, help="cell numbers to promote (default: all that worked)"
    )
    p.add_argument("--dry-run", action="store_true")
    return p


def _seconds(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h`` → seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    raw = text.strip().lower()
    try:
        value = float(raw[:-1]) * units[raw[-1]] if raw and raw[-1] in units else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (90, 90s, 30m, 2h)") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return value


def _numbers(text: str | None, flag: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise UsageError(f"{flag} {text!r} is not a list of numbers (e.g. 1,3)") from None


def _session() -> session_mod.Session:
    current = session_mod.current_session()
    if current is None:
        raise UsageError(
            "no session is running in this kernel: start one with %alchemist_session start -n 2"
            " (or %alchemist_session attach ID)"
        )
    return current


def _session_or_last() -> session_mod.Session:
    """The running session, else the one this kernel used last (a broken or stopped
    session: restart brings it up again, status says how it ended)."""
    return session_mod.current_session() or session_mod.last_session() or _session()


def _cell_id(shell: Any) -> str | None:
    """The frontend's id of the running cell (JupyterLab sends one), if any."""
    header = getattr(shell, "parent_header", None) or {}
    meta = header.get("metadata") or {}
    cell_id = meta.get("cellId") or meta.get("cell_id")
    return str(cell_id) if cell_id else None


@magics_class
class SessionMagics(Magics):
    """``%alchemist_session``, ``%%alchemist_px``, ``%alchemist_autopx``, ``%alchemist_push``."""

    autopx = False

    @line_magic
    def alchemist_session(self, line: str) -> Any:
        """``%alchemist_session start|status|stop|restart|promote|attach ...``"""
        try:
            words = shlex.split(line)
        except ValueError as e:
            raise UsageError(f"%alchemist_session: cannot read the line ({e})") from None
        if not words or words[0] not in _SUBCOMMANDS:
            raise UsageError(f"%alchemist_session needs one of: {', '.join(_SUBCOMMANDS)}")
        command, rest = words[0], words[1:]
        try:
            return getattr(self, f"_{command}")(rest)
        except UsageError:
            raise
        except AlchemistError as e:
            raise UsageError(str(e)) from None

    def _start(self, words: list[str]) -> None:
        args = _start_parser().parse_args(words)
        from alchemist.client import default_backend

        opts = options_from_args(args, "magic", only=SESSION_OPTIONS)
        s = session_mod.session(
            opts["workers"],
            gpus_per_worker=opts["gpus_per_worker"] or 0,
            name=opts["name"],
            backend=opts["backend"] or default_backend(),
            idle_timeout=args.idle_timeout,
            collective_timeout=args.collective_timeout,
            start_timeout=args.start_timeout,
            env=opts["env"],
            no_warm=opts["no_warm"],
        )
        print(
            f"session {s.id}: {s.world_size} ranks ready (engine id = rank); run cells on them"
            " with %%alchemist_px"
        )

    def _status(self, words: list[str]) -> dict[str, Any]:
        st = _session_or_last().status()
        line = f"session {st['id']}: {st['state']}"
        if st["reason"]:
            line += f" ({st['reason']})"
        line += (
            f"; {st['world_size']} ranks, alive: {st['ranks_alive'] or 'none'};"
            f" {st['cells']} cells ({st['cells_ok']} ok);"
            + (" a cell runs" if st["busy"] else f" idle {st['idle_s']:.0f} s")
        )
        print(line)
        return st

    def _stop(self, words: list[str]) -> None:
        s = _session_or_last()
        if s is not session_mod.current_session() and not s.running():
            print(f"session {s.id} has ended already: {s.status()['state']}")
            return
        s.stop()
        print(f"session {s.id} stopped")

    def _attach(self, words: list[str]) -> None:
        if len(words) != 1:
            raise UsageError("%alchemist_session attach ID")
        s = session_mod.Session.attach(words[0])
        print(f"attached to session {s.id} ({s.world_size} ranks)")

    def _restart(self, words: list[str]) -> None:
        p = _Parser(prog="%alchemist_session restart", add_help=False)
        p.add_argument("--replay", default=None)
        args = p.parse_args(words)
        old = _session_or_last()  # a broken session is what restart is for
        new = old.restart(_numbers(args.replay, "--replay"))
        print(f"session {old.id} stopped; session {new.id}: {new.world_size} fresh ranks ready")

    def _promote(self, words: list[str]) -> Any:
        args = _promote_parser().parse_args(words)
        options = options_from_args(args, "magic")
        last = session_mod.last_session()  # a stopped session promotes from its transcript
        result = (session_mod.current_session() or last or _session()).promote(
            _numbers(args.cells, "--cells"),
            dry_run=args.dry_run,
            namespace=self.shell.user_ns if self.shell is not None else None,
            **options,
        )
        if args.dry_run:
            print(result.text)
            return None
        print(f"submitted job {result.id} ({result.name}): %alchemist_attach {result.id}")
        return result

    @magic_arguments()
    @argument("--targets", default=None, help="ranks to run on, e.g. 0 or 0,2 (default: all)")
    @argument("--no-stream", action="store_true", help="show each rank's output at the end")
    @cell_magic
    def alchemist_px(self, line: str, cell: str) -> None:
        """Run the cell on the session's ranks (state kept between cells)."""
        try:
            args = parse_argstring(self.alchemist_px, line)
        except ValueError as e:
            raise UsageError(f"%%alchemist_px: cannot read the line ({e})") from None
        s = _session()
        try:
            s.run(cell, args.targets, stream=not args.no_stream, cell_id=_cell_id(self.shell))
        except CellFailed as e:
            raise UsageError(str(e)) from None
        except SessionError as e:
            raise UsageError(str(e)) from None
        except KeyboardInterrupt:  # the ranks were interrupted and said so: one line
            raise UsageError(
                f"cell interrupted; session {s.id} goes on (the next cell checks the ranks)"
            ) from None

    @line_magic
    def alchemist_autopx(self, line: str) -> None:
        """Toggle: every following cell runs as ``%%alchemist_px`` (until run again)."""
        shell = self.shell
        assert shell is not None
        transforms = shell.input_transformers_cleanup
        if _autopx_transform in transforms:
            transforms.remove(_autopx_transform)
            print("%alchemist_autopx off: cells run in the notebook again")
        else:
            _session()
            transforms.append(_autopx_transform)
            print("%alchemist_autopx on: every cell runs on the session's ranks")

    @line_magic
    def alchemist_push(self, line: str) -> None:
        """``%alchemist_push NAME [NAME...]``: copy the notebook's values to every rank."""
        names = line.split()
        if not names:
            raise UsageError("%alchemist_push NAME [NAME...]: name the variables to copy")
        assert self.shell is not None
        ns = self.shell.user_ns
        missing = [n for n in names if n not in ns]
        if missing:
            raise UsageError(f"%alchemist_push: no variable {', '.join(missing)} in the notebook")
        try:
            _session().push({n: ns[n] for n in names})
        except AlchemistError as e:
            raise UsageError(str(e)) from None


def _autopx_transform(lines: list[str]) -> list[str]:
    """Run a cell as ``%%alchemist_px`` unless it is a magic of its own (``%...``) or
    empty, so ``%alchemist_autopx`` (and every line magic) still runs in the notebook."""
    first = next((ln for ln in lines if ln.strip()), "")
    if not first or first.lstrip().startswith("%"):
        return lines
    return ["%%alchemist_px\n", *lines]


def register(ipython: Any) -> None:
    """Register the interactive mode's magics in ``ipython``."""
    ipython.register_magics(SessionMagics)
