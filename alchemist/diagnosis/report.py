"""The diagnosis report: one JSON-serialisable dict every entry point shows.

:func:`diagnose` gathers, for a job, each rank's progress (its last logged step and
when, :mod:`~alchemist.diagnosis.progress`), its liveness (running, finished, dead and
how, :mod:`~alchemist.diagnosis.collect`) and its stacks (asked for on the ranks'
unix sockets, by signal and by request file on the local backend; by request file
elsewhere; else the watchdog's last dump), then :func:`classify` names what is
going on in one sentence, the ``headline``:

- ``dead_rank``: a rank's process is gone before its code finished;
- ``rendezvous_wait``: ranks wait in ``init_process_group`` for ranks that have not
  joined;
- ``missing_rank``: some ranks wait in a collective that others have not reached;
- ``checkpoint_barrier``: the waiting ranks are in Alchemist's own checkpoint barrier
  (labelled, not called a hang);
- ``desync``: the ranks wait in different collectives;
- ``transport_hang``: every rank waits in the same collective: no rank is missing;
- ``user_deadlock``: no rank is in a collective and none advanced for the stall
  threshold;
- ``running``: the ranks advanced during the diagnosis, or nothing waits;
- ``not_running``: the job is queued, or has ended: nothing to diagnose.

While the ranks answer, ``diagnose(..., on_partial=callback)`` calls back with a
partial report (``classification`` ``collecting``: who answered, who is awaited), which
the monitor shows until the final report is made.

Diagnosis reads and signals; it never changes a job's state.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alchemist.diagnosis import collect, progress, stacks
from alchemist.diagnosis.progress import format_ranks
from alchemist.job.jobdir import JobDir
from alchemist.runtime import hooks, recorder


def _s(ranks: list[int], verb: str) -> str:
    """``verb`` agreeing with ``format_ranks(ranks)``: ``wait`` → ``waits`` for one rank."""
    return verb + "s" if len(set(ranks)) == 1 else verb


def _doing(act: stacks.Activity) -> str:
    """Where a rank is: its user frame, else its innermost frame (starting up, say)."""
    if act.user_frame is None and act.top is not None:
        return f"{_where(act.top)}, outside the user's code"
    return _where(act.user_frame)


def _from(act: stacks.Activity) -> str:
    """``from the cell (line 9)``; ``after the user's code`` for a wait with no user frame
    (an algorithm's ``finish``, which the runtime calls once the cell has ended)."""
    return f"from {_where(act.user_frame)}" if act.user_frame else "after the user's code"


#: The file name ipykernel compiles a cell under (``<tmp>/ipykernel_<pid>/<hash>.py``).
_IPYKERNEL_CELL = re.compile(r"/ipykernel_\d+/\d+\.py$")


def _where(frame: stacks.Frame | None) -> str:
    """``the cell (line 7)``, ```load_batch` (cell line 88)``, ```f` (model.py line 3)``."""
    if frame is None:
        return "no Python frame"
    kind = {"<cell>": "cell", "<script>": "script"}.get(frame.file)
    if kind is None and _IPYKERNEL_CELL.search(frame.file):
        kind = "cell"  # a cell run by a kernel: an interactive session's engine
    if kind is None:
        kind = frame.file if frame.file.startswith("<") else Path(frame.file).name
    if frame.function == "<module>":
        return (
            f"the {kind} (line {frame.line})"
            if kind in ("cell", "script")
            else f"{kind} line {frame.line}"
        )
    return f"`{frame.function}` ({kind} line {frame.line})"


def _is_jobs_code(job_dir: JobDir, file: str) -> bool:
    """Whether ``file`` is the job's cell or script as its ranks compiled it (``<cell>``,
    or the script's path: ``alchemist.runtime.worker.user_code_file``)."""
    if file in ("<cell>", "<script>"):
        return True
    from alchemist.bundle.store import script_name

    script = script_name(job_dir.bundle)
    return script is not None and Path(file).name == Path(script).name


def _source_line(job_dir: JobDir, frame: stacks.Frame | None) -> str | None:
    """The text of a cell's or script's line, from the job's bundle."""
    if frame is None or not _is_jobs_code(job_dir, frame.file):
        return None
    try:
        lines = (job_dir.bundle / "source.py").read_text(errors="replace").splitlines()
    except OSError:
        return None
    return lines[frame.line - 1].strip() if 0 < frame.line <= len(lines) else None


#: Seconds a local job's ranks get to answer the request file once every rank answered
#: the signal (the responder looks every half second; a rank holding the GIL never does).
LOCAL_ANSWER_S = 1.0

Dump = tuple[list[stacks.Thread], int | None, str, float]


def _marker_main(job_dir: JobDir, rank: int) -> int | None:
    main = (hooks.read_marker(job_dir, rank) or {}).get("main_thread")
    return main if isinstance(main, int) else None


def _rank_stacks(
    job_dir: JobDir,
    world_size: int,
    running: bool,
    local: bool,
    timeout: float,
    last_step: dict[int, float],
    progress_cb: Callable[[dict[int, Dump], list[int]], None] | None = None,
) -> tuple[dict[int, Dump], dict[int, dict[str, Any] | None], list[int]]:
    """``(dumps, recorders, asked)``: rank → (threads, main thread id, source
    ``socket``/``signal``/``request``/``watchdog``, time of the dump); rank → its
    flight-recorder summary (:func:`alchemist.runtime.recorder.summarize`, None: no
    recorder) for the ranks that answered on their socket or the request file; the
    ranks whose hooks are in place (those asked).

    A local job's ranks are asked on their unix sockets first (every thread, and the
    recorder, within :data:`collect.SOCKET_WAIT_S`); those that did not answer there
    are signalled (the signal answers even for a rank that holds the GIL) and asked by
    request file. Any other backend's ranks are asked by request file only. A rank that
    answered none is shown by its watchdog's last dump, unless the rank logged a step
    after it (the dump is of a wait that ended).

    ``progress_cb(dumps so far, ranks still awaited)`` is called once the ranks are
    asked, and again as each rank answers.
    """
    out: dict[int, Dump] = {}
    recs: dict[int, dict[str, Any] | None] = {}
    asked: list[int] = []
    request = None
    start = time.monotonic()
    if running:
        asked = [r for r in range(world_size) if hooks.read_marker(job_dir, r) is not None]
    expected: list[int] = list(asked)
    procs: dict[int, collect.RankProcess] = {}

    def tell() -> None:
        if progress_cb is not None:
            progress_cb(dict(out), [r for r in expected if r not in out])

    if running and local:
        procs = collect.rank_processes(job_dir, world_size)
        # A stopped process (SIGSTOP, a debugger) answers nothing until continued: it
        # is not asked, and nobody waits the timeout out for it.
        stopped = {r for r, rp in procs.items() if collect.is_stopped(rp.process.pid)}
        procs = {r: rp for r, rp in procs.items() if r not in stopped}
        asked = [r for r in asked if r not in stopped]
        expected = sorted(procs)

        def by_socket(rank: int, text: str) -> None:
            threads = stacks.parse_dump(text)
            if threads:
                recs[rank] = recorder.parse_block(text)
                out[rank] = (threads, procs[rank].main_thread, "socket", time.time())
                tell()

        tell()
        soon = min(start + timeout, time.monotonic() + collect.SOCKET_WAIT_S)
        collect.socket_answers(procs, soon, on_answer=by_socket)
    pending = [r for r in asked if r not in out]
    if pending:
        try:
            request = collect.post_request(job_dir)
        except OSError:
            request = None  # a read-only job directory: signals and watchdog only
    if running and local:

        def signalled(rank: int, text: str) -> None:
            threads = stacks.parse_dump(text)
            if threads:
                out[rank] = (threads, procs[rank].main_thread, "signal", time.time())
                tell()

        rest = {r: rp for r, rp in procs.items() if r not in out}
        if rest:
            left = max(0.0, start + timeout - time.monotonic())
            collect.request_stacks(job_dir, rest, left, on_answer=signalled)
    elif request is not None:
        tell()
    if request is not None:
        deadline = start + timeout
        if local and all(r in out for r in asked):
            deadline = min(deadline, time.monotonic() + LOCAL_ANSWER_S)

        def answered(rank: int, text: str) -> None:
            recs[rank] = recorder.parse_block(text)
            threads = stacks.parse_dump(text)
            if rank not in out and threads:
                out[rank] = (threads, _marker_main(job_dir, rank), "request", time.time())
                tell()

        try:
            collect.wait_answers(request, pending, deadline, on_answer=answered)
        finally:
            collect.remove_request(request, pending)
    for rank in range(world_size):
        if rank in out:
            continue
        found = collect.watchdog_stacks(job_dir, rank)
        if found is None or found[1] < last_step.get(rank, 0.0):
            continue
        threads = stacks.parse_dump(found[0])
        if threads:
            out[rank] = (threads, _marker_main(job_dir, rank), "watchdog", found[1])
    return out, recs, asked


def _entries(
    job_dir: JobDir,
    world_size: int,
    alive: dict[int, collect.Liveness],
    after: dict[int, progress.RankProgress],
    started: float,
    dumps: dict[int, Dump],
    recs: dict[int, dict[str, Any] | None],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[int, stacks.Activity]]:
    """``(ranks, groups, activities)`` of a report: an entry per rank (see the module),
    the ranks with identical main-thread stacks together, and what each main thread does."""
    ranks: list[dict[str, Any]] = []
    groups: dict[tuple[stacks.Frame, ...], dict[str, Any]] = {}
    acts: dict[int, stacks.Activity] = {}
    for rank in range(world_size):
        entry: dict[str, Any] = {"rank": rank}
        live = alive.get(rank)
        entry["liveness"] = live.state if live else "unknown"
        entry["pid"] = live.pid if live else None
        entry["exit"] = live.exit if live else None
        p = after.get(rank)
        entry["step"] = p.step if p else None
        entry["last_step_time"] = p.time if p else None
        entry["last_step_ago_s"] = round(started - p.time, 3) if p else None
        dump = dumps.get(rank)
        entry["answered"] = dump is not None and dump[2] in ("socket", "signal", "request")
        entry["stacks_from"] = dump[2] if dump else None
        entry["stacks_time"] = dump[3] if dump else None
        entry["activity"] = None
        entry["code"] = None
        entry["group"] = None
        entry["threads"] = []
        rec = recs.get(rank)
        entry["collective_seq"] = rec.get("seq") if rec else None
        entry["collective_op"] = rec.get("op") if rec else None
        entry["recorder"] = rec
        if dump is not None:
            threads, main_id, _, _ = dump
            main = stacks.main_thread(threads, main_id)
            entry["threads"] = [
                {**t.to_dict(), "main": main is not None and t.id == main.id} for t in threads
            ]
            if main is not None:
                act = stacks.activity(main)
                acts[rank] = act
                entry["activity"] = act.to_dict()
                entry["code"] = _source_line(job_dir, act.user_frame)
                group = groups.setdefault(
                    main.frames,
                    {
                        "ranks": [],
                        "summary": stacks.summary(main),
                        "frames": [f.to_dict() for f in main.frames],
                    },
                )
                group["ranks"].append(rank)
        ranks.append(entry)

    ordered = sorted(groups.values(), key=lambda g: g["ranks"][0])
    for index, group in enumerate(ordered):
        for rank in group["ranks"]:
            ranks[rank]["group"] = index
    for entry in ranks:
        entry["line"] = _rank_line(entry, acts.get(entry["rank"]))

    return ranks, ordered, acts


def diagnose(
    job_dir: JobDir,
    *,
    job_id: str,
    state: str,
    reason: str | None,
    world_size: int,
    backend: str = "local",
    timeout: float = collect.STACKS_TIMEOUT_S,
    ask: bool = True,
    on_partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """The report of one job (see the module docstring); JSON-serialisable.

    Args:
        job_dir: the job's directory.
        job_id, state, reason: the job's id, state and reason as its status says.
        world_size: the job's ranks.
        backend: the job's backend; a ``local`` job's ranks are asked on their sockets,
            then by signal and request file; any other's by request file only (and
            the watchdog's dumps in the job directory are read for ranks that are silent).
        timeout: seconds to wait for the ranks' stacks.
        ask: False sends the ranks nothing (no signal, no request file): the report
            reads only what they wrote by themselves, the watchdog's dumps.
        on_partial: called with a *partial report* once the ranks are asked and again
            each time a rank answers, while the others are awaited (from the calling
            thread): the report's shape, with ``collecting`` true, ``classification``
            ``collecting``, the ranks that answered so far, ``waiting_for`` (the ranks
            still awaited) and a ``headline`` such as ``rank 0 answered; waiting for
            rank 1 (up to 3 s)``. An exception it raises ends the diagnosis.
    """
    started = time.time()
    running = state == "running"
    before = progress.read_progress(job_dir)
    local = backend == "local"
    alive = collect.liveness(job_dir, world_size) if local else {}
    last_step = {r: p.time for r, p in before.items()}

    def partial(dumps: dict[int, Dump], waiting: list[int]) -> None:
        if on_partial is None:
            return
        ranks, groups, _ = _entries(job_dir, world_size, alive, before, started, dumps, {})
        on_partial(
            {
                "job_id": job_id,
                "state": state,
                "classification": "collecting",
                "headline": collecting_headline(sorted(dumps), waiting, timeout),
                "collecting": True,
                "waiting_for": waiting,
                "stall": None,
                "world_size": world_size,
                "answered": len(dumps),
                "partial": True,
                "ranks": ranks,
                "groups": groups,
                "notes": [],
                "time": started,
                "elapsed_s": round(time.time() - started, 3),
            }
        )

    dumps, recs, asked_by_request = _rank_stacks(
        job_dir, world_size, running and ask, local, timeout, last_step, partial
    )
    after = progress.read_progress(job_dir) if running else before
    stall = progress.assess(after, world_size) if running else None
    advanced = sorted(r for r, p in after.items() if r in before and p.step != before[r].step)

    ranks, ordered, acts = _entries(job_dir, world_size, alive, after, started, dumps, recs)

    kind, headline = classify(
        job_id=job_id,
        state=state,
        reason=reason,
        world_size=world_size,
        liveness=alive,
        acts=acts,
        stall=stall,
        advanced=advanced,
        recorders=recs,
    )
    notes = []
    # liveness is known locally; elsewhere the ranks asked are those whose hooks are in place
    asked = [e["rank"] for e in ranks if e["liveness"] == "running"] if local else asked_by_request
    silent = [r for r in asked if not ranks[r]["answered"]]
    if running and not ask:
        notes.append(
            "the ranks were not asked: stacks come only from their watchdog"
            f" (after {hooks.WATCHDOG_FLOOR_S:g} s without an alchemist.log call)"
        )
    elif running and local and silent:
        stopped = [r for r in silent if collect.is_stopped(ranks[r]["pid"])]
        others = [r for r in silent if r not in stopped]
        if stopped:
            notes.append(
                f"{format_ranks(stopped)} {'is' if len(stopped) == 1 else 'are'} stopped"
                " (SIGSTOP, or a debugger; SIGCONT resumes it): not asked for stacks, a"
                " stopped process answers nothing"
            )
        if others:
            notes.append(
                f"{format_ranks(others)} did not answer with stacks within {timeout:g} s"
                " (starting up, hooks not installed, or its code holds the GIL with the"
                " stack signal blocked)"
            )
    elif running and not local:
        answered = len(asked) - len(silent)
        notes.append(
            f"{answered}/{world_size} ranks answered the request file on the {backend}"
            f" backend (within {timeout:g} s)"
            + (
                f"; {format_ranks(silent)} shown by the watchdog's last dump, if any"
                if silent
                else ""
            )
        )
    if running and not after:
        notes.append("the job logged no steps (alchemist.log): progress cannot be judged")
    return {
        "job_id": job_id,
        "state": state,
        "classification": kind,
        "headline": headline,
        "stall": stall.to_dict() if stall else None,
        "world_size": world_size,
        "answered": sum(1 for e in ranks if e["answered"]),
        "partial": bool(running and ask and (silent or (not local and len(asked) < world_size))),
        "collecting": False,
        "waiting_for": [],
        "ranks": ranks,
        "groups": ordered,
        "notes": notes,
        "time": started,
        "elapsed_s": round(time.time() - started, 3),
    }


def diagnose_job(
    job: Any,
    *,
    timeout: float | None = None,
    on_partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """:func:`diagnose` of a :class:`alchemist.client.Job` (what ``job.diagnose()``
    returns), with ``on_partial`` called as the ranks answer (the monitor's Diagnose)."""
    st = job.status()
    return diagnose(
        job.job_dir,
        job_id=job.id,
        state=st.state.value,
        reason=st.reason,
        world_size=job.spec.world_size,
        backend=job.backend_name,
        timeout=collect.STACKS_TIMEOUT_S if timeout is None else timeout,
        on_partial=on_partial,
    )


def collecting_headline(answered: list[int], waiting: list[int], timeout: float) -> str:
    """``rank 0 answered; waiting for rank 1 (up to 3 s)``: a partial report's headline."""
    if not answered and not waiting:
        return "no rank to ask: reading what the ranks wrote by themselves"
    if not answered:
        return f"asking {format_ranks(waiting)} for stacks (up to {timeout:g} s)"
    said = f"{format_ranks(answered)} answered"
    if not waiting:
        return said + "; making the report"
    return said + f"; waiting for {format_ranks(waiting)} (up to {timeout:g} s)"


def _rank_line(entry: dict[str, Any], act: stacks.Activity | None) -> str:
    """``rank 0  running  step 12 (3 s ago)  all_reduce ← the cell (line 7)``."""
    parts = [f"rank {entry['rank']}", entry["liveness"]]
    if entry["exit"]:
        parts.append(entry["exit"])
    if entry["step"] is not None:
        parts.append(f"step {entry['step']} ({entry['last_step_ago_s']:.0f} s ago)")
    if act is not None:
        if act.collective:
            label = f" ({act.alchemist_wait})" if act.alchemist_wait else ""
            doing = f"in {act.collective}{label} from {_doing(act)}"
        elif act.rendezvous:
            doing = "in init_process_group"
        elif act.server_wait:
            doing = f"in {act.server_wait} {_from(act)}"
        else:
            doing = f"in {_doing(act)}"
        parts.append(doing + (" [watchdog]" if entry["stacks_from"] == "watchdog" else ""))
    elif entry["liveness"] == "running":
        parts.append("no stacks")
    return "  ".join(parts)


def classify(
    *,
    job_id: str,
    state: str,
    reason: str | None,
    world_size: int,
    liveness: dict[int, collect.Liveness],
    acts: dict[int, stacks.Activity],
    stall: progress.Stall | None,
    advanced: list[int],
    recorders: dict[int, dict[str, Any] | None] | None = None,
) -> tuple[str, str]:
    """``(classification, headline)`` of a job from its ranks' state (see the module).

    ``recorders`` (rank → flight-recorder summary) numbers the collective of a
    ``missing_rank`` headline (``all_reduce #12``) when every waiting rank's newest entry
    is that collective, with one sequence id, and every lagging rank has a recorder too.
    """
    if state != "running":
        ended = {"succeeded": "succeeded", "failed": "failed", "cancelled": "was cancelled"}
        said = ended.get(state, f"is {state}")
        return "not_running", f"job {job_id} {said}" + (f": {reason}" if reason else "")
    dead = [r for r, lv in liveness.items() if lv.state in ("dead", "failed")]
    if dead:
        lv = liveness[dead[0]]
        verb = "died" if lv.state == "dead" else "failed"
        return "dead_rank", f"rank {dead[0]} {verb}: {lv.exit}" + (
            f" (and {format_ranks(dead[1:])})" if dead[1:] else ""
        )
    if advanced:
        return "running", (
            f"the job is running: {format_ranks(advanced)} advanced during the diagnosis"
        )
    acts = _backward_waits(acts, recorders or {})
    waiting = {r: a for r, a in acts.items() if a.collective}
    joining = [r for r, a in acts.items() if a.rendezvous]
    serving = {r: a for r, a in acts.items() if a.server_wait}
    busy = {
        r: a for r, a in acts.items() if not a.collective and not a.rendezvous and not a.server_wait
    }
    finished = [r for r, lv in liveness.items() if lv.state == "finished"]
    absent = [r for r, lv in liveness.items() if lv.state == "not started"]
    unanswered = [
        r
        for r in range(world_size)
        if r not in acts and (r not in liveness or liveness[r].state == "running")
    ]
    if joining and (absent or busy or len(joining) < world_size):
        late = absent or sorted(set(range(world_size)) - set(joining))
        return "rendezvous_wait", (
            f"waiting for {format_ranks(late)} to join: {format_ranks(joining)}"
            f" {_s(joining, 'wait')} in init_process_group"
        )
    if serving and not waiting and (busy or unanswered):
        return "missing_rank", _server_headline(serving, busy, unanswered)
    if waiting and (busy or finished or unanswered):
        ops = sorted({a.collective for a in waiting.values() if a.collective})
        op = " / ".join(ops)
        numbered = _numbered(op, list(waiting), list(busy), recorders or {})
        lagging = []
        for r, a in sorted(busy.items()):
            if numbered:
                last = recorder.label((recorders or {}).get(r)) or "none"
                lagging.append(
                    f"rank {r} has not reached {numbered} (its last collective: {last});"
                    f" it is in {_doing(a)}"
                )
            else:
                lagging.append(f"rank {r} has not reached {op}; it is in {_doing(a)}")
        stopped = [r for r in unanswered if r in liveness and collect.is_stopped(liveness[r].pid)]
        if stopped:  # it cannot answer: its process state says why it is missing
            lagging.insert(
                0,
                f"{format_ranks(stopped)} {'is' if len(stopped) == 1 else 'are'} stopped"
                f" (SIGSTOP, or a debugger; SIGCONT resumes it) and"
                f" {'has' if len(stopped) == 1 else 'have'} not reached {op}",
            )
        rest = [r for r in unanswered if r not in stopped]
        if rest:
            lagging.append(
                f"{format_ranks(rest)} {'has' if len(rest) == 1 else 'have'}"
                f" not reached {op} (gave no stacks)"
            )
        if finished:
            lagging.append(f"{format_ranks(finished)} finished without reaching {op}")
        wait_where = sorted({_doing(a) for a in waiting.values()})
        waiters = f"{format_ranks(sorted(waiting))} {_s(list(waiting), 'wait')}"
        labels = {a.alchemist_wait for a in waiting.values()}
        if labels == {"the checkpoint barrier"}:
            return "checkpoint_barrier", (
                f"{waiters} at the checkpoint barrier (Alchemist's own wait, not a hang)"
                f" for the others: " + "; ".join(lagging)
            )
        others = sorted({a.alchemist_wait for a in waiting.values() if a.alchemist_wait})
        label = f" ({', '.join(others)})" if others else ""
        return "missing_rank", (
            "; ".join(lagging)
            + f"; {waiters} in {numbered or op}{label} from {', '.join(wait_where)}"
        )
    if waiting and len(waiting) == len(acts):
        kinds = {a.collective or "" for a in waiting.values()}
        if len(kinds) > 1:
            each = "; ".join(
                f"rank {r} in {a.collective} from {_doing(a)}" for r, a in sorted(waiting.items())
            )
            return "desync", f"the ranks wait in different collectives: {each}"
        op = next(iter(kinds))
        where = ", ".join(sorted({_doing(a) for a in waiting.values()}))
        return "transport_hang", (
            f"every rank that answered waits in {op} from {where}: no rank is missing;"
            " if this lasts, suspect the transport (network, NCCL, GPU)"
        )
    stopped = [r for r in unanswered if r in liveness and collect.is_stopped(liveness[r].pid)]
    if stopped and not waiting:
        each = "; ".join(f"rank {r} in {_doing(a)}" for r, a in sorted(busy.items()))
        return "missing_rank", (
            f"{format_ranks(stopped)} {'is' if len(stopped) == 1 else 'are'} stopped"
            " (SIGSTOP, or a debugger; SIGCONT resumes it)" + (f"; {each}" if each else "")
        )
    if busy and not waiting and stall is not None and stall.stalled:
        each = "; ".join(f"rank {r} in {_doing(a)}" for r, a in sorted(busy.items()))
        return "user_deadlock", (
            f"no rank is in a collective and none advanced for {stall.idle_s:.0f} s: {each}"
        )
    if not acts:
        note = f": {stall.note}" if stall else ""
        return "running", f"the job is running; no rank answered with stacks{note}"
    each = "; ".join(
        f"rank {r} in {a.server_wait} {_from(a)}" if a.server_wait else f"rank {r} in {_doing(a)}"
        for r, a in sorted({**busy, **serving}.items())
    )
    return "running", f"the job is running; no rank waits in a collective: {each}"


#: Where a rank waits for DDP's gradient all-reduce: the autograd engine runs it, so
#: no ``torch.distributed`` frame is on the main thread's stack.
_BACKWARD = {("graph.py", "_engine_run_backward"), ("__init__.py", "backward")}


def _backward_waits(
    acts: dict[int, stacks.Activity], recorders: dict[int, dict[str, Any] | None]
) -> dict[int, stacks.Activity]:
    """``acts`` with a rank in autograd's ``backward`` whose flight recorder's newest
    collective has not completed counted as waiting in it (DDP's gradient all-reduce,
    which runs in the autograd engine: its Python stack shows only ``backward``)."""
    out = dict(acts)
    for rank, act in acts.items():
        snap = recorders.get(rank)
        if act.collective or not snap or snap.get("state") == "completed" or not snap.get("op"):
            continue
        top = act.top
        if top is None or (Path(top.file).name, top.function) not in _BACKWARD:
            continue
        if "/torch/autograd/" in top.file.replace("\\", "/"):
            out[rank] = dataclasses.replace(
                act,
                collective=str(snap["op"]),
                alchemist_wait="the gradient all-reduce of backward (DDP)",
            )
    return out


def _server_headline(
    serving: dict[int, stacks.Activity],
    busy: dict[int, stacks.Activity],
    unanswered: list[int],
) -> str:
    """The headline of ranks waiting on the parameter server (``async``, ``easgd``)
    while others are busy: the server waits for a worker that has not finished, or a
    worker waits for a reply from the server (its threads in the server rank: that rank
    is stopped, or its code holds the GIL)."""
    ending = {r: a for r, a in serving.items() if "finish" in (a.server_wait or "")}
    asking = {r: a for r, a in serving.items() if r not in ending}
    parts = []
    if ending:
        lagging = [
            f"rank {r} has not finished; it is in {_doing(a)}" for r, a in sorted(busy.items())
        ]
        if unanswered:
            lagging.append(f"{format_ranks(unanswered)} gave no stacks")
        where = ", ".join(sorted({_from(a) for a in ending.values()}))
        parts.append(
            "; ".join(lagging)
            + f"; {format_ranks(sorted(ending))} {_s(list(ending), 'wait')} for the parameter"
            f" server: every worker must finish ({where})"
        )
    if asking:
        where = ", ".join(sorted({_from(a) for a in asking.values()}))
        others = "; ".join(f"rank {r} is in {_doing(a)}" for r, a in sorted(busy.items()))
        parts.append(
            f"{format_ranks(sorted(asking))} {_s(list(asking), 'wait')} for the parameter"
            f" server's reply ({where}); it runs in the server rank's threads (rank 0 by"
            " default), which answer while that rank's code releases the GIL"
            + (f": {others}" if others else "")
            + (f"; {format_ranks(unanswered)} gave no stacks" if unanswered else "")
        )
    return "; ".join(parts)


def _numbered(
    op: str, waiting: list[int], lagging: list[int], recs: dict[int, dict[str, Any] | None]
) -> str | None:
    """``all_reduce #12`` when every waiting rank's recorder says it is in ``op`` number 12
    and every lagging rank's recorder names its own last collective, else None."""
    snaps = [recs.get(r) for r in waiting]
    if not lagging or any(r not in recs or recs[r] is None for r in lagging):
        return None
    if not all(s and s.get("seq") is not None and s.get("op") == op for s in snaps):
        return None
    seqs = {s["seq"] for s in snaps if s}
    return f"{op} #{seqs.pop()}" if len(seqs) == 1 else None


def format_report(report: dict[str, Any]) -> str:
    """The report as text: the headline, a line per rank, the grouped stacks, the notes."""
    out = [report["headline"]]
    out.extend(f"  {entry['line']}" for entry in report["ranks"])
    if report["world_size"] > 2:  # ranks with the same stack, together
        out.append("stacks:")
        out.extend(f"  {format_ranks(g['ranks'])}: {g['summary']}" for g in report["groups"])
    out.extend(f"note: {n}" for n in report["notes"])
    return "\n".join(out)
