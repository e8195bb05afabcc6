"""The classification and headline of a report (alchemist.diagnosis.report.classify),
and reading faulthandler's dump format (alchemist.diagnosis.stacks).

These are pure functions: the inputs are built here (what each rank does, as the
collector would find it). The real processes that produce such inputs are in
test_diagnosis_hooks.py and test_diagnosis_jobs.py.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

from alchemist.diagnosis import stacks
from alchemist.diagnosis.collect import Liveness
from alchemist.diagnosis.progress import Stall
from alchemist.diagnosis.report import classify
from alchemist.diagnosis.stacks import Activity, Frame

TORCH = sysconfig.get_paths()["purelib"] + "/torch/distributed/distributed_c10d.py"
HELPERS = str(Path(stacks.__file__).resolve().parent.parent / "runtime" / "helpers.py")


def cell(line: int, function: str = "<module>") -> Frame:
    return Frame("<cell>", line, function)


def waiting(op: str, line: int, wait: str | None = None) -> Activity:
    return Activity(cell(line), op, False, wait, Frame(TORCH, 1, op))


def busy(line: int, function: str) -> Activity:
    return Activity(cell(line, function), None, False, None, cell(line, function))


def running(n: int) -> dict[int, Liveness]:
    return {r: Liveness(r, "running", 100 + r) for r in range(n)}


def run(
    acts: dict[int, Activity],
    n: int = 2,
    liveness: dict[int, Liveness] | None = None,
    stall: Stall | None = None,
    advanced: list[int] | None = None,
    state: str = "running",
) -> tuple[str, str]:
    return classify(
        job_id="j1",
        state=state,
        reason=None,
        world_size=n,
        liveness=running(n) if liveness is None else liveness,
        acts=acts,
        stall=stall,
        advanced=advanced or [],
    )


def test_missing_rank_names_its_frame_and_the_waiters_collective() -> None:
    kind, headline = run({0: waiting("all_reduce", 12), 1: busy(88, "load_batch")})
    assert kind == "missing_rank"
    assert headline == (
        "rank 1 has not reached all_reduce; it is in `load_batch` (cell line 88);"
        " rank 0 waits in all_reduce from the cell (line 12)"
    )


def test_alchemist_s_checkpoint_barrier_is_labelled_not_a_hang() -> None:
    acts = {0: waiting("barrier", 30, "the checkpoint barrier"), 1: busy(20, "evaluate")}
    kind, headline = run(acts)
    assert kind == "checkpoint_barrier"
    assert "rank 0 waits at the checkpoint barrier (Alchemist's own wait, not a hang)" in headline
    assert "`evaluate` (cell line 20)" in headline


def test_every_rank_in_the_same_collective_is_a_transport_hang() -> None:
    kind, headline = run({0: waiting("all_reduce", 12), 1: waiting("all_reduce", 12)})
    assert kind == "transport_hang"
    assert "no rank is missing" in headline


def test_ranks_in_different_collectives_are_a_desync() -> None:
    kind, headline = run({0: waiting("all_reduce", 12), 1: waiting("broadcast", 14)})
    assert kind == "desync"
    assert "rank 0 in all_reduce" in headline and "rank 1 in broadcast" in headline


def test_a_dead_rank_comes_first_with_how_it_died() -> None:
    live = running(2)
    live[1] = Liveness(1, "dead", 101, "was killed by signal 9 (SIGKILL) (out of memory?)")
    kind, headline = run({0: waiting("all_reduce", 12)}, liveness=live)
    assert (kind, headline) == (
        "dead_rank",
        "rank 1 died: was killed by signal 9 (SIGKILL) (out of memory?)",
    )


def test_a_rank_that_never_started_is_waited_for() -> None:
    live = running(2)
    live[1] = Liveness(1, "not started", None)
    joining = Activity(None, None, True, None, Frame(TORCH, 1, "init_process_group"))
    kind, headline = run({0: joining}, liveness=live)
    assert (kind, headline) == (
        "rendezvous_wait",
        "waiting for rank 1 to join: rank 0 waits in init_process_group",
    )


def test_no_collective_and_a_stall_is_a_user_deadlock() -> None:
    stall = Stall(True, 45.0, 30.0, [], "every rank at step 7; no rank advanced for 45 s")
    acts = {0: busy(5, "take_lock"), 1: busy(9, "take_other_lock")}
    kind, headline = run(acts, stall=stall)
    assert kind == "user_deadlock"
    assert headline.startswith("no rank is in a collective and none advanced for 45 s")
    # the same picture without a stall is a job at work
    assert run(acts)[0] == "running"


def test_ranks_that_advanced_during_the_diagnosis_are_running() -> None:
    kind, headline = run({0: waiting("all_reduce", 12), 1: busy(8, "f")}, advanced=[0, 1])
    assert kind == "running" and "ranks 0–1 advanced" in headline


def test_a_job_that_is_not_running_has_nothing_to_diagnose() -> None:
    assert run({}, state="queued") == ("not_running", "job j1 is queued")


def test_user_frames_are_the_cell_and_the_user_s_files_not_libraries() -> None:
    assert stacks.is_user_file("<cell>") and stacks.is_user_file("<script>")
    assert stacks.is_user_file("/home/alice/project/model.py")
    assert not stacks.is_user_file("<frozen runpy>")
    assert not stacks.is_user_file(TORCH)
    assert not stacks.is_user_file(HELPERS)
    assert not stacks.is_user_file(sysconfig.get_paths()["stdlib"] + "/threading.py")


def test_the_collective_is_the_outermost_torch_distributed_call() -> None:
    dump = (
        "Thread 0x00007f0000000001 (most recent call first):\n"
        f'  File "{TORCH}", line 2806 in broadcast\n'
        f'  File "{TORCH}", line 3300 in broadcast_object_list\n'
        f'  File "{HELPERS}", line 180 in restore\n'
        '  File "<cell>", line 4 in <module>\n'
    )
    (thread,) = stacks.parse_dump(dump)
    assert thread.id == 0x7F0000000001 and not thread.current
    act = stacks.activity(thread)
    assert act.collective == "broadcast_object_list"
    assert act.alchemist_wait == "restore's broadcast of the checkpoint to load"
    assert act.user_frame == Frame("<cell>", 4, "<module>")
    assert stacks.summary(thread).endswith("← <cell>:4")


def test_of_two_dumps_appended_at_once_the_last_is_read() -> None:
    first = 'Thread 0x0000000000000001 (most recent call first):\n  File "<cell>", line 1 in f\n'
    second = 'Thread 0x0000000000000001 (most recent call first):\n  File "<cell>", line 2 in g\n'
    (thread,) = stacks.parse_dump(first + "\n" + second)
    assert thread.frames == (Frame("<cell>", 2, "g"),)


def test_a_cell_run_by_a_kernel_is_called_the_cell() -> None:
    """An interactive session's engine runs cells compiled by ipykernel under
    ``<tmp>/ipykernel_<pid>/<hash>.py``: the report says "the cell", not that name."""
    from alchemist.diagnosis import report, stacks

    frame = stacks.Frame(file="/tmp/ipykernel_4242/3746512494.py", line=8, function="<module>")
    assert report._where(frame) == "the cell (line 8)"
    inner = stacks.Frame(file="/tmp/ipykernel_4242/3746512494.py", line=3, function="load")
    assert report._where(inner) == "`load` (cell line 3)"
    other = stacks.Frame(file="/home/ana/model.py", line=3, function="load")
    assert report._where(other) == "`load` (model.py line 3)"
