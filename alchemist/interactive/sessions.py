"""The notebook's side of a session: start, run cells, push and pull, stop, promote.

A :class:`Session` is a job of kind ``session`` (:mod:`alchemist.job.session`),
submitted as every job is (:func:`alchemist.client.submit_session` →
``Backend.submit``), whose ranks are ipyparallel engines: started by the local
supervisor (:mod:`alchemist.backends.local.session`) or as the pods of an Indexed Job.
This class keeps ipyparallel out of its interface: cells go in as source text, values as Python objects, output comes back as
text with a rank prefix, failures as :class:`~alchemist.interactive.errors.SessionError`.

Contract:

- :meth:`Session.start` returns once every rank's engine registered with engine id =
  rank and its process group is up, or raises with nothing left running.
- :meth:`Session.run` streams each rank's output in order, prefixed ``[rank r]``; an
  interrupt (``KeyboardInterrupt`` in the notebook) sends SIGINT to every target rank,
  waits :data:`INTERRUPT_GRACE_S` for them, names those still busy, and re-raises. A
  rank that died makes the session broken (:class:`SessionBroken`, with the reason):
  the supervisor has stopped the others.
- After an interrupted or failed cell the next cell first runs a health check
  (:mod:`alchemist.interactive.rankside`) that rebuilds the process group when the
  ranks fell out of step.
- Every cell is recorded (:mod:`alchemist.interactive.transcript`); :meth:`promote`
  submits the successful ones as one batch job through :func:`alchemist.client.submit`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from alchemist.interactive import output, rankside, transcript
from alchemist.interactive.engines import engines_for
from alchemist.interactive.errors import CellFailed, SessionBroken, SessionError
from alchemist.job.jobdir import JobDir, atomic_write_json
from alchemist.job.session import SessionDir, session_spec

#: Default seconds a collective may wait before it fails (the process group's timeout).
#: Short enough that an interrupted rank blocked in gloo (which ignores SIGINT) comes
#: back in a couple of minutes; long enough for a rank-0-only evaluation.
DEFAULT_COLLECTIVE_TIMEOUT_S = 120.0
#: Default seconds the engines get to come up (import torch, meet, register).
DEFAULT_START_TIMEOUT_S = 120.0
#: Seconds an interrupted cell's ranks get to stop before those still busy are named.
INTERRUPT_GRACE_S = 5.0
#: Seconds a finished cell waits for the ranks' displayed values to arrive.
VALUES_WAIT_S = 2.0
#: Seconds the health check's barrier waits for every rank.
HEALTH_BARRIER_S = 10.0
#: Seconds between the warning and the stop of an idle session (at most; see start()).
IDLE_GRACE_S = 60.0

_current: Session | None = None
_last: Session | None = None  # the latest started or attached here, stopped or not


def last_session() -> Session | None:
    """The session this kernel started or attached last, even if it was stopped since
    (promote works from its transcript)."""
    return _last


def current_session() -> Session | None:
    """The session this kernel started or attached last, if it was not stopped."""
    return _current


def session(
    workers: int = 2,
    *,
    gpus_per_worker: int = 0,
    name: str | None = None,
    backend: str = "local",
    idle_timeout: float | None = None,
    collective_timeout: float = DEFAULT_COLLECTIVE_TIMEOUT_S,
    start_timeout: float = DEFAULT_START_TIMEOUT_S,
    env: dict[str, str] | None = None,
    no_warm: bool = False,
) -> Session:
    """Start a session of ``workers`` ranks and return it (see :meth:`Session.start`)."""
    return Session.start(
        workers,
        gpus_per_worker=gpus_per_worker,
        name=name,
        backend=backend,
        idle_timeout=idle_timeout,
        collective_timeout=collective_timeout,
        start_timeout=start_timeout,
        env=env,
        no_warm=no_warm,
    )


@dataclass
class CellResult:
    """A cell that ran on every target rank without an error."""

    n: int
    ranks: list[int]


class Session:
    """A running (or ended) session. Use :func:`session` or :meth:`start` to make one."""

    def __init__(self, job_dir: JobDir) -> None:
        self.job_dir = job_dir
        self.dirs = SessionDir(job_dir)
        self.config: dict[str, Any] = json.loads(self.dirs.config.read_text())
        self.engines = engines_for(job_dir, str(self.config.get("backend") or "local"))
        self._client: Any = None
        self._suspect = False  # an interrupted or failed cell: check the ranks first
        self._pending: Any = None  # an interrupted cell some rank still runs
        self._generation = 0  # the process group's store prefix (pg-<n>)
        self._cells = len(transcript.read(self.dirs.transcript))

    # -- identity --------------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self.job_dir.job_id

    @property
    def world_size(self) -> int:
        return int(self.config["world_size"])

    @property
    def ranks(self) -> list[int]:
        return list(range(self.world_size))

    def __repr__(self) -> str:
        return f"<alchemist.Session {self.id} {self.world_size} ranks {self._state()}>"

    # -- start -----------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        workers: int = 2,
        *,
        gpus_per_worker: int = 0,
        name: str | None = None,
        backend: str = "local",
        idle_timeout: float | None = None,
        collective_timeout: float = DEFAULT_COLLECTIVE_TIMEOUT_S,
        start_timeout: float = DEFAULT_START_TIMEOUT_S,
        env: dict[str, str] | None = None,
        no_warm: bool = False,
    ) -> Session:
        """Start ``workers`` ranks (``gpus_per_worker`` > 0: one rank per GPU) and make the
        session this kernel's current one. On the local backend the ranks are forked from
        the user's warm pool (as batch ranks are) unless ``no_warm``.

        Raises:
            SessionError: a session of this kernel still runs, an option is invalid, or
                the engines did not come up within ``start_timeout`` seconds (nothing is
                left running then).
        """
        global _current, _last
        if _current is not None and _current.running():
            raise SessionError(
                f"session {_current.id} ({_current.world_size} ranks) is already running:"
                " use it, or stop it first with %alchemist_session stop"
            )
        for flag, value in (
            ("--collective-timeout", collective_timeout),
            ("--start-timeout", start_timeout),
            ("--idle-timeout", idle_timeout),
        ):
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise SessionError(f"{flag} must be a number of seconds above 0, got {value!r}")
        from alchemist.backends import get_backend
        from alchemist.errors import AlchemistError

        try:
            spec = session_spec(workers, gpus_per_worker, name, env or {}, backend, no_warm)
            ships_files = get_backend(backend).ships_files
        except AlchemistError as e:
            raise SessionError(str(e)) from None
        cfg = {
            "workers": workers,
            "gpus_per_worker": gpus_per_worker,
            "world_size": spec.world_size,
            "collective_timeout": float(collective_timeout),
            "start_timeout": float(start_timeout),
            "idle_timeout": float(idle_timeout) if idle_timeout else None,
            # The warning comes this long before the stop: a tenth of the timeout, at most a minute.
            "idle_grace": min(IDLE_GRACE_S, float(idle_timeout) / 10) if idle_timeout else None,
            # Where the workers do not see the notebook's folder (pods), they start in the
            # job directory, as a batch job's do; elsewhere in the notebook's folder.
            "cwd": None if ships_files else os.getcwd(),
            "env": dict(env or {}),
            "name": spec.name,
            "backend": backend,
        }
        from alchemist.client import submit_session

        try:
            # The one submission path: the backend's dry run (the machine's queue asks
            # for the ranks' CPU slots and GPUs, as for a batch job's; a quota, an
            # image), the job directory and row, then Backend.submit.
            job = submit_session(spec, cfg)
        except AlchemistError as e:
            raise SessionError(f"the session did not start: {e}") from None
        for line in job.warnings:
            print(f"[alchemist] {line}", file=sys.stderr, flush=True)
        self = cls(job.job_dir)
        try:
            self._wait_ready(float(start_timeout))
        except SessionError as e:
            self._kill(str(e))
            raise
        except BaseException:
            self._kill("the start was interrupted")
            raise
        _current = _last = self
        return self

    def _wait_ready(self, timeout: float) -> None:
        """Wait until every engine registered; time spent queued (waiting for the
        machine's CPU slots or GPUs) does not count against ``timeout``."""
        deadline = time.monotonic() + timeout
        shown = None
        while True:
            st = self.engines.state()
            if st.get("state") == "queued":
                if st.get("reason") != shown:
                    shown = st.get("reason")
                    print(f"[alchemist] session {self.id} queued: {shown}", flush=True)
                deadline = time.monotonic() + timeout
                time.sleep(0.2)
                continue
            if st.get("state") in ("failed", "cancelled", "succeeded"):
                raise SessionError(
                    f"session {self.id} did not start: {st.get('reason')}{self._last_log_line()}"
                )
            if self._client is None and self.dirs.client_file.exists():
                self._connect()
            if (
                self._client is not None
                and len(self._client.ids) >= self.world_size
                and st.get("state") == "running"
            ):
                break
            if time.monotonic() > deadline:
                up = len(self._client.ids) if self._client is not None else 0
                pending = st.get("reason") if st.get("state") == "pending" else None
                raise SessionError(
                    f"session {self.id}: {up} of {self.world_size} engines came up within"
                    f" {timeout:g} s (--start-timeout)"
                    + (f" ({pending})" if pending else "")
                    + "; nothing was left running"
                    + self._last_log_line()
                )
            time.sleep(0.1)
        ids = sorted(self._client.ids)
        infos = self._client[ids].apply_sync(rankside.info)
        for engine_id, info in zip(ids, infos, strict=True):
            if info["rank"] != engine_id:  # pragma: no cover - --IPEngine.id pins it
                raise SessionError(f"engine {engine_id} runs rank {info['rank']}: not pinned")
        self._client[:].use_cloudpickle()
        self._activity(busy=False)

    def _connect(self) -> None:
        import ipyparallel as ipp

        try:
            self._client = ipp.Client(str(self.dirs.client_file), timeout=30)
        except ValueError:  # the controller is still writing the file: next time
            self._client = None

    def _last_log_line(self) -> str:
        """``": rank r's log ends: ..."`` for the first rank log with an error, or ""."""
        for r in self.ranks:
            try:
                lines = self.job_dir.rank_log(r).read_text(errors="replace").strip().splitlines()
            except OSError:
                continue
            if lines and ("Error" in lines[-1] or "error" in lines[-1]):
                return f" (rank {r}'s log ends: {lines[-1].strip()[:200]})"
        return ""

    @classmethod
    def attach(cls, job_id: str) -> Session:
        """Connect to a running session of the current user (after a kernel restart) and
        make it the current one.

        Raises:
            SessionError: no such session, not a session, or not running.
        """
        global _current, _last
        from alchemist.client import attach as attach_job

        job = attach_job(job_id)
        if job.spec.entry != "session":
            raise SessionError(f"job {job_id} is a batch job, not a session")
        self = cls(job.job_dir)
        if not self.running():
            raise SessionError(f"session {job_id} is not running: {self._state_line()}")
        self._connect()
        self._client.wait_for_engines(self.world_size, timeout=30)
        self._generation = int((self.job_dir.read_state() or {}).get("session", {}).get("pg", 0))
        _current = _last = self
        return self

    # -- state -----------------------------------------------------------------------------
    def _state(self) -> str:
        return str(self.engines.state().get("state", "pending"))

    def _state_line(self) -> str:
        st = self.engines.state()
        reason = st.get("reason")
        return str(st.get("state", "pending")) + (f" ({reason})" if reason else "")

    def running(self) -> bool:
        """Whether the session's engines run (it was neither stopped nor broken)."""
        return self._state() in ("pending", "queued", "running")

    def _check_usable(self) -> None:
        """Raise unless the session's engines run."""
        st = self.engines.state()
        state = st.get("state")
        if state == "failed":
            self._close()
            raise SessionBroken(
                f"session {self.id} is broken: {st.get('reason')}; %alchemist_session restart"
                " brings up fresh engines"
            )
        if state in ("succeeded", "cancelled"):
            self._close()
            raise SessionError(
                f"session {self.id} was stopped ({st.get('reason')}): start a new one with"
                " %alchemist_session start"
            )

    def _activity(self, busy: bool) -> None:
        atomic_write_json(self.dirs.activity, {"busy": busy, "time": time.time()})

    def status(self) -> dict[str, Any]:
        """The session's state, ranks, cells and files, as a dict (the magic prints it)."""
        st = self.engines.state(fresh=True)
        records = transcript.read(self.dirs.transcript)
        alive = self.engines.alive(self.ranks)
        try:
            activity = json.loads(self.dirs.activity.read_text())
        except (OSError, ValueError):
            activity = {}
        return {
            "id": self.id,
            "state": st.get("state", "pending"),
            "reason": st.get("reason"),
            "world_size": self.world_size,
            "ranks_alive": alive,
            "cells": len(records),
            "cells_ok": sum(1 for r in records if r.status == "ok"),
            "busy": bool(activity.get("busy")),
            "idle_s": None if activity.get("busy") else time.time() - activity.get("time", 0),
            "collective_timeout": self.config["collective_timeout"],
            "idle_timeout": self.config.get("idle_timeout"),
            "job_dir": str(self.job_dir.root),
            "backend": self.engines.backend,
        }

    # -- cells -----------------------------------------------------------------------------
    def _targets(self, targets: Any) -> list[int]:
        if targets is None or targets == "all":
            return self.ranks
        if isinstance(targets, int):
            targets = [targets]
        if isinstance(targets, str):
            try:
                targets = [int(t) for t in targets.replace(" ", "").split(",") if t]
            except ValueError:
                raise SessionError(
                    f"--targets {targets!r} is not a list of ranks (e.g. 0 or 0,2)"
                ) from None
        out = sorted(set(int(t) for t in targets))
        unknown = [t for t in out if t not in self.ranks]
        if unknown or not out:
            raise SessionError(
                f"unknown target rank(s) {', '.join(map(str, unknown)) or '(none)'}: session"
                f" {self.id} has ranks 0 to {self.world_size - 1}"
            )
        return out

    def run(
        self,
        code: str,
        targets: Any = None,
        *,
        stream: bool = True,
        cell_id: str | None = None,
    ) -> CellResult:
        """Run ``code`` on the target ranks (default: all), state kept between cells.

        Output is shown with a ``[rank r]`` prefix, as it comes (``stream``) or rank
        after rank at the end: printed, or in a notebook in a rank-filterable widget
        (:mod:`alchemist.widgets.rank_output`). Then, rank after rank, what each displayed (``display()``)
        and its last expression's value (``[rank r] Out: ...``; HTML and images are
        displayed in a notebook).

        Raises:
            SessionError: no usable session, or unknown targets (nothing ran).
            SessionBroken: a rank died; the others were stopped.
            CellFailed: the code raised on some ranks (their tracebacks were printed).
            KeyboardInterrupt: the notebook was interrupted; every target rank got SIGINT.
        """
        self._check_usable()
        ranks = self._targets(targets)
        if self._suspect:
            self.health_check()
        self._cells += 1
        n = self._cells
        streams = output.RankStreams(self.job_dir, ranks)
        view = output.view(ranks, self.id)  # text, or a rank-filterable widget in a notebook
        held: list[tuple[int, str]] = []

        def flush(final: bool = False) -> None:
            lines = streams.read(final=final)
            if stream:
                view.show(lines)
            else:
                held.extend(lines)

        self._activity(busy=True)
        # silent=False: the engines publish the last expression's value (execute_result).
        ar = self._client[ranks].execute(code, silent=False, block=False)
        try:
            try:
                while not ar.ready():
                    flush()
                    self._check_usable()
                    ar.wait(0.05)
            except KeyboardInterrupt:
                self._suspect = True
                self.interrupt(ranks)
                self._wait_interrupted(ar, flush)
                flush(final=True)
                if held:
                    view.show(sorted(held, key=lambda item: item[0]))
                per_rank = self._outcomes(ar, ranks)[0] if ar.ready() else {}
                self._record(n, code, ranks, "interrupted", per_rank, cell_id)
                raise
            except BaseException:
                self._record(n, code, ranks, "failed", {}, cell_id)
                raise
            flush(final=True)
            if held:
                view.show(sorted(held, key=lambda item: item[0]))
        finally:
            view.close()
            self._activity(busy=False)
        per_rank, failed = self._outcomes(ar, ranks)
        if not failed:
            self._show_values(ar)
        if failed:
            self._suspect = True
            self._record(n, code, ranks, "failed", per_rank, cell_id)
            raise CellFailed(
                f"the cell failed on rank{'s' if len(failed) > 1 else ''}"
                f" {', '.join(map(str, failed))} (tracebacks above)",
                failed,
            )
        self._record(n, code, ranks, "ok", per_rank, cell_id)
        return CellResult(n=n, ranks=ranks)

    def _record(
        self,
        n: int,
        code: str,
        ranks: list[int],
        status: str,
        per_rank: dict[str, str],
        cell_id: str | None,
    ) -> None:
        transcript.append(
            self.dirs.transcript,
            transcript.CellRecord(
                n=n,
                source=code,
                targets=None if ranks == self.ranks else ranks,
                status=status,
                ranks=per_rank,
                cell_id=cell_id,
            ),
        )

    def _show_values(self, ar: Any) -> None:
        """Show what the ranks displayed (``display()``) and their last expression's value.

        Both travel on ipyparallel's iopub channel, which can trail the cell's reply by a
        moment: wait for it a little (:data:`VALUES_WAIT_S`), then show what came.
        """
        ar.wait_for_output(VALUES_WAIT_S)
        metadata = ar.metadata if isinstance(ar.metadata, list) else [ar.metadata]
        for md in sorted(metadata, key=lambda m: int(m["engine_id"])):
            output.show_values(
                int(md["engine_id"]), md.get("outputs") or [], md.get("execute_result")
            )

    def _outcomes(self, ar: Any, ranks: list[int]) -> tuple[dict[str, str], list[int]]:
        """Per rank: ``ok`` or the error's line; the ranks that failed."""
        from ipyparallel import error as ipp_error

        per_rank = {str(r): "ok" for r in ranks}
        errors: dict[int, Any] = {}
        try:
            ar.get(timeout=0)
        except ipp_error.CompositeError as e:
            for ename, evalue, tb, info in e.elist:
                errors[int(info["engine_id"])] = (ename, evalue, tb)
        except ipp_error.RemoteError as e:
            errors[int(e.engine_info.get("engine_id", ranks[0]))] = (e.ename, e.evalue, e.traceback)
        if errors:
            self._check_usable()  # a rank that died explains the errors: say that instead
        for r, (ename, evalue, tb) in sorted(errors.items()):
            per_rank[str(r)] = f"{ename}: {evalue}"
            for line in (tb or f"{ename}: {evalue}").rstrip().splitlines():
                sys.stderr.write(f"[rank {r}] {line}\n")
        sys.stderr.flush()
        return per_rank, sorted(errors)

    def interrupt(self, ranks: list[int] | None = None) -> None:
        """Send SIGINT to the ranks (default: all): Python code there raises
        ``KeyboardInterrupt``; a rank blocked in a gloo collective stays blocked until
        the collective timeout (gloo ignores signals)."""
        self.engines.interrupt(self._client, ranks if ranks is not None else self.ranks)

    def _wait_interrupted(self, ar: Any, flush: Any) -> None:
        """Give interrupted ranks :data:`INTERRUPT_GRACE_S` to stop; name those that did not."""
        deadline = time.monotonic() + INTERRUPT_GRACE_S
        while not ar.ready() and time.monotonic() < deadline:
            flush()
            try:
                ar.wait(0.05)
            except KeyboardInterrupt:  # a second interrupt: stop waiting
                break
        if ar.ready():
            print(f"[alchemist] interrupted: every rank stopped (session {self.id})", flush=True)
            return
        self._pending = ar
        busy = self._busy_ranks(ar)
        where = self._where(busy)
        print(
            f"[alchemist] interrupted, but rank{'s' if len(busy) > 1 else ''}"
            f" {', '.join(map(str, busy))} still run{'' if len(busy) > 1 else 's'}{where}:"
            " a rank waiting in a collective stops at the collective timeout"
            f" ({self.config['collective_timeout']:g} s); wait for it, or"
            " %alchemist_session restart",
            flush=True,
        )

    def _busy_ranks(self, ar: Any) -> list[int]:
        done = set()
        for md in ar.metadata:
            if md.get("status") is not None or md.get("completed"):
                done.add(int(md["engine_id"]))
        return [r for r in ar._targets if r not in done] if hasattr(ar, "_targets") else []

    def _where(self, ranks: list[int]) -> str:
        """``" (rank 1 in all_reduce)"``: what the hang diagnosis says the ranks wait in."""
        if not ranks:
            return ""
        try:
            rep = self.diagnose(timeout=2.0)
        except Exception:
            return ""
        headline = rep.get("headline") if isinstance(rep, dict) else None
        return f" ({headline})" if headline else ""

    def diagnose(self, timeout: float = 3.0) -> dict[str, Any]:
        """The hang diagnosis report of the session's ranks (:mod:`alchemist.diagnosis`)."""
        from alchemist.diagnosis import report

        st = self.engines.state()
        return dict(
            report.diagnose(
                self.job_dir,
                job_id=self.id,
                state=str(st.get("state", "running")),
                reason=st.get("reason"),
                world_size=self.world_size,
                backend=self.engines.backend,
                timeout=timeout,
            )
        )

    # -- health ----------------------------------------------------------------------------
    def health_check(self) -> bool:
        """Check that the ranks are in step; rebuild the process group when they are not.

        Returns True when the group was rebuilt (the user must wrap the model again).

        Raises:
            SessionError: a rank still runs an interrupted cell.
        """
        self._check_usable()
        if self._pending is not None and not self._pending.ready():
            busy = self._busy_ranks(self._pending)
            raise SessionError(
                f"rank{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy)) or '?'} still"
                f" run{'' if len(busy) > 1 else 's'} the interrupted cell (waiting in a"
                " collective?): it stops at the"
                f" collective timeout ({self.config['collective_timeout']:g} s); wait, or"
                " %alchemist_session restart"
            )
        self._pending = None
        view = self._client[self.ranks]
        seqs = view.apply_async(rankside.sequence_number).get(timeout=30)
        why = None
        if len(set(seqs)) > 1:
            why = (
                "ranks are out of step (collectives made: "
                + ", ".join(f"rank {r} {s}" for r, s in zip(self.ranks, seqs, strict=True))
                + ")"
            )
        else:
            failures = view.apply_async(rankside.barrier, HEALTH_BARRIER_S).get(
                timeout=HEALTH_BARRIER_S + 30
            )
            bad = [f"rank {r}: {f}" for r, f in zip(self.ranks, failures, strict=True) if f]
            if bad:
                why = "the process group failed a barrier (" + "; ".join(bad)[:300] + ")"
        self._suspect = False
        if why is None:
            return False
        self._generation += 1
        view.apply_async(rankside.rebuild, self._generation).get(
            timeout=float(self.config["collective_timeout"]) + 60
        )
        self.job_dir.write_state(session={"pg": self._generation})
        print(
            f"[alchemist] {why}: the process group was rebuilt. Re-run the cell that wraps"
            " the model (alchemist.distribute) before training on.",
            flush=True,
        )
        return True

    # -- values ----------------------------------------------------------------------------
    def push(self, values: dict[str, Any], targets: Any = None) -> None:
        """Set ``values`` (name → object) in the ranks' namespaces (cloudpickle)."""
        self._check_usable()
        self._client[self._targets(targets)].push(values, block=True)

    def pull(self, name: str, rank: int = 0) -> Any:
        """The value of ``name`` on ``rank``.

        Raises:
            SessionError: ``rank`` is not one of the session's, or has no ``name``.
        """
        self._check_usable()
        (r,) = self._targets([rank])
        from ipyparallel import error as ipp_error

        try:
            return self._client[r].pull(name, block=True)
        except (ipp_error.RemoteError, ipp_error.CompositeError) as e:
            raise SessionError(f"rank {r} has no variable {name!r} ({e})") from None

    # -- end -------------------------------------------------------------------------------
    def _close(self) -> None:
        global _current
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass
            self._client = None
        if _current is self:
            _current = None

    def stop(self) -> None:
        """Stop the engines and the controller; idempotent. The job ends ``succeeded``."""
        self._close()
        self.engines.stop(self.running())
        self._reconcile()

    def _kill(self, reason: str = "") -> None:
        """Stop whatever of the session still runs, and mark it ended if nobody did
        (``reason``: it failed so)."""
        self._close()
        self.engines.kill(reason, running=self.running())
        if self.running():
            self.job_dir.write_state(
                state="failed", reason=reason or "the session did not start", finished=time.time()
            )

    def _reconcile(self) -> None:
        """Bring the job index up to date with the session's state."""
        try:
            from alchemist.client import attach

            attach(self.id).status()
        except Exception:
            pass

    def restart(self, replay: list[int] | None = None) -> Session:
        """Stop this session and start a fresh one with the same options; run again the
        cells numbered in ``replay`` (of this session's transcript), in order. Nothing is
        replayed unless asked. Returns the new session (now the current one)."""
        records = {r.n: r for r in transcript.read(self.dirs.transcript)}
        replay = list(replay or [])
        missing = [n for n in replay if n not in records]
        if missing:
            raise SessionError(
                f"no cell #{', #'.join(map(str, missing))} in session {self.id}'s transcript"
            )
        self.stop()
        cfg = self.config
        new = Session.start(
            int(cfg["workers"]),
            gpus_per_worker=int(cfg["gpus_per_worker"]),
            name=cfg.get("name"),
            backend=str(cfg.get("backend") or "local"),
            idle_timeout=cfg.get("idle_timeout"),
            collective_timeout=float(cfg["collective_timeout"]),
            start_timeout=float(cfg["start_timeout"]),
            env=cfg.get("env") or None,
            no_warm=bool(json.loads(self.job_dir.spec.read_text()).get("no_warm")),
        )
        for n in replay:
            rec = records[n]
            print(f"[alchemist] replaying cell #{n}", flush=True)
            new.run(rec.source, rec.targets, cell_id=rec.cell_id)
        return new

    # -- promote ---------------------------------------------------------------------------
    def promotion(self, cells: list[int] | None = None) -> transcript.Promotion:
        """The batch script the successful cells make (see :mod:`~.transcript`)."""
        try:
            return transcript.promotion(
                transcript.read(self.dirs.transcript), self.world_size, cells
            )
        except ValueError as e:
            raise SessionError(str(e)) from None

    def promote(
        self,
        cells: list[int] | None = None,
        *,
        dry_run: bool = False,
        namespace: dict[str, Any] | None = None,
        **options: Any,
    ) -> Any:
        """Submit the successful cells as one batch job through :func:`alchemist.client.submit`
        (a dry run with ``dry_run``). ``options`` are job options (``workers`` defaults to
        the session's, ``name`` to the session's name + ``-batch``). Cells left out are
        warned about on stderr.

        Returns:
            The :class:`~alchemist.client.Job` (or :class:`~alchemist.client.DryRun`).

        Raises:
            SessionError: no successful cell to promote, or an unknown cell number.
        """
        from alchemist import client

        promo = self.promotion(cells)
        for line in promo.warnings():
            print(f"[alchemist] warning: {line}", file=sys.stderr, flush=True)
        if not promo.kept:
            raise SessionError(f"session {self.id} has no successful cell to promote")
        options = {k: v for k, v in options.items() if v is not None}
        options.setdefault("workers", int(self.config["workers"]))
        options.setdefault("gpus_per_worker", int(self.config["gpus_per_worker"]) or None)
        options.setdefault("name", f"{self.config.get('name') or 'session'}-batch"[:63])
        options = {k: v for k, v in options.items() if v is not None}
        job = client.submit(promo.script, namespace=namespace, dry_run=dry_run, **options)
        if not dry_run:
            self._warn_if_queued_behind(job)
        return job

    def _warn_if_queued_behind(self, job: Any) -> None:
        """Say so when the promoted job cannot start before this (local, running) session
        frees the machine's CPU slots or GPUs it holds."""
        if self.engines.backend != "local" or job.spec.backend != "local" or not self.running():
            return
        try:  # what the local backend's dry run asked of the machine's queue
            adm = json.loads(self.job_dir.launch.read_text()).get("admission") or {}
        except (OSError, ValueError):
            return
        cap = adm.get("capacity") or {}
        slots = int(cap.get("slots") or 0)
        gpus = int(cap.get("gpus") or 0)
        need_gpus = job.spec.workers * job.spec.resources.gpus
        if (slots and self.world_size + job.spec.world_size > slots) or (
            need_gpus and int(adm.get("gpus") or 0) + need_gpus > gpus
        ):
            print(
                f"[alchemist] job {job.id} waits in the queue while session {self.id} holds"
                " this machine's CPU slots or GPUs: %alchemist_session stop frees them"
                " (promote also works after the stop)",
                file=sys.stderr,
                flush=True,
            )
