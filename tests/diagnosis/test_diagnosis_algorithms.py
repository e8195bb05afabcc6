"""Hang diagnosis of real ``async``, ``bmuf``, ``easgd`` and ``horovod`` jobs.

Real parts: 2-rank jobs on the local backend (``alchemist.client.submit``; torchrun, or
``horovodrun`` for Horovod), ``alchemist.distribute`` with the job's ``--algorithm``,
the real hooks, the collector signalling the real rank processes. In each job rank 1
gets stuck in ``load_batch`` (it sleeps) at its fourth step while rank 0 goes on until
it waits in the algorithm's own exchange:

- ``bmuf``: the block average (a gloo ``all_reduce`` in ``block_update``);
- ``async``, ``easgd``: rank 0 trains its steps, then (the runtime's ``finish`` after
  the cell) the parameter server waits for every worker to finish: a wait on a TCP
  server, not a collective, which the report says in words;
- ``horovod``: ``hvd.DistributedOptimizer.step`` waits for the gradients' all-reduce.

Every job is cancelled at the end (the ``submit`` fixture).
"""

from __future__ import annotations

import re
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest

from alchemist import client
from alchemist.diagnosis import progress, stacks
from tests.support.diagnose import diagnose_until, line_of, logged, wait_for

CELL = """
import os, time, torch, alchemist
def load_batch(step):
    if RANK == 1 and step == 3:
        time.sleep(600)
    return torch.randn(8, 4)
RANK = int(os.environ["RANK"])
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
model, opt = alchemist.distribute(model, opt)
print(f"rank {RANK} ready", flush=True)
for step in range(STEPS):
    x = load_batch(step)
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
    alchemist.log(step, loss=1.0)
print(f"rank {RANK} trained", flush=True)
"""
SLEEP_LINE = line_of(CELL, "time.sleep(600)")
STEP_LINE = line_of(CELL, "opt.step()")


def stuck_job(submit: Callable[..., client.Job], algorithm: str, **options: object) -> client.Job:
    job = submit(
        CELL, namespace={"STEPS": 8}, algorithm=algorithm, algorithm_options=options or None
    )
    wait_for(
        lambda: logged(job, 0, "rank 0 ready") and logged(job, 1, "rank 1 ready"), 180, "ready"
    )

    def rank1_logged_step_2() -> bool:
        # Rank 1 goes from logging step 2 straight into load_batch(3), which sleeps: a
        # report before that can find it still in step 2's backward (seen in CI, Horovod).
        mark = progress.read_progress(job.job_dir).get(1)
        return mark is not None and mark.step >= 2

    wait_for(rank1_logged_step_2, 120, "rank 1 at step 2")
    return job


def check_rank1(found: dict[str, object]) -> None:
    rank1 = found["ranks"][1]  # type: ignore[index]
    assert rank1["answered"], rank1
    assert rank1["activity"]["user_frame"] == {
        "file": "<cell>",
        "line": SLEEP_LINE,
        "function": "load_batch",
    }
    assert rank1["code"] == "time.sleep(600)"


def test_bmuf_rank_0_waits_in_the_block_average_for_rank_1(
    submit: Callable[..., client.Job],
) -> None:
    job = stuck_job(submit, "bmuf", block_size=2)
    found = diagnose_until(job, "missing_rank", timeout=30)
    assert re.fullmatch(
        rf"rank 1 has not reached all_reduce( #\d+ \(its last collective: all_reduce #\d+\))?;"
        rf" it is in `load_batch` \(cell line {SLEEP_LINE}\);"
        rf" rank 0 waits in all_reduce( #\d+)? \(BMUF's block average\) from the cell"
        rf" \(line {STEP_LINE}\)",
        found["headline"],
    ), found["headline"]
    rank0 = found["ranks"][0]
    assert rank0["activity"]["collective"] == "all_reduce"
    assert rank0["activity"]["alchemist_wait"] == "BMUF's block average"
    check_rank1(found)


@pytest.mark.parametrize("algorithm", ["async", "easgd"])
def test_the_parameter_server_waits_for_rank_1_to_finish(
    submit: Callable[..., client.Job], algorithm: str
) -> None:
    """Rank 0 trains on (the server answers it at once), then the runtime's ``finish``
    waits until every worker is done: no collective; the report says it in words."""
    job = stuck_job(submit, algorithm)
    wait_for(lambda: logged(job, 0, "rank 0 trained"), 60, "rank 0 to finish its steps")
    found = diagnose_until(job, "missing_rank", timeout=30)
    assert found["headline"] == (
        f"rank 1 has not finished; it is in `load_batch` (cell line {SLEEP_LINE}); rank 0"
        " waits for the parameter server: every worker must finish (after the user's code)"
    ), found["headline"]
    rank0 = found["ranks"][0]
    assert rank0["activity"]["collective"] is None
    assert rank0["activity"]["server_wait"] == (
        "the parameter server's wait for every worker to finish"
    )
    assert rank0["line"].endswith(
        "in the parameter server's wait for every worker to finish after the user's code"
    )
    check_rank1(found)
    assert job.status().state.value == "running"


def test_a_worker_waits_for_the_server_while_the_server_rank_holds_the_gil(
    submit: Callable[..., client.Job],
) -> None:
    """``async``: rank 0 runs a catastrophic ``re`` match (C code that never releases the
    GIL), so the server's threads in rank 0 cannot answer, and rank 1 waits in its
    request; the signal still gets rank 0's stack."""
    cell = (
        "import os, re, torch, alchemist\n"
        "RANK = int(os.environ['RANK'])\n"
        "model = torch.nn.Linear(4, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "model, opt = alchemist.distribute(model, opt)\n"
        "print(f'rank {RANK} ready', flush=True)\n"
        "def spin():\n"
        "    re.match(r'(a+)+b', 'a' * 64)\n"
        "for step in range(10**9):\n"
        "    if RANK == 0 and step == 3:\n"
        "        spin()\n"
        "    opt.zero_grad()\n"
        "    model(torch.randn(8, 4)).pow(2).mean().backward()\n"
        "    opt.step()\n"
    )
    job = submit(cell, algorithm="async")
    wait_for(
        lambda: logged(job, 0, "rank 0 ready") and logged(job, 1, "rank 1 ready"), 180, "ready"
    )
    found = diagnose_until(job, "missing_rank", timeout=30)
    spin, step = line_of(cell, "re.match"), line_of(cell, "opt.step()")
    assert found["headline"] == (
        f"rank 1 waits for the parameter server's reply (from the cell (line {step})); it"
        " runs in the server rank's threads (rank 0 by default), which answer while that"
        f" rank's code releases the GIL: rank 0 is in `spin` (cell line {spin})"
    ), found["headline"]
    rank0, rank1 = found["ranks"]
    assert rank0["stacks_from"] == "signal"
    assert rank1["activity"]["server_wait"] == "a request to the parameter server"
    assert rank1["line"].endswith(
        f"in a request to the parameter server from the cell (line {step})"
    )


HOROVODRUN = Path(sys.executable).with_name("horovodrun")
try:
    import horovod.torch  # noqa: F401

    HAVE_HOROVOD = HOROVODRUN.exists()
except ImportError:
    HAVE_HOROVOD = False


@pytest.mark.skipif(
    not HAVE_HOROVOD,
    reason="Horovod is not installed: run scripts/setup.d/50-horovod.sh (its build failed"
    " or was not run)",
)
def test_horovod_rank_0_waits_in_the_gradient_all_reduce_for_rank_1(
    submit: Callable[..., client.Job],
) -> None:
    job = stuck_job(submit, "horovod")
    found = diagnose_until(job, "missing_rank", timeout=30)
    assert found["headline"] == (
        f"rank 1 has not reached hvd.allreduce; it is in `load_batch` (cell line"
        f" {SLEEP_LINE}); rank 0 waits in hvd.allreduce from the cell (line {STEP_LINE})"
    ), found["headline"]
    check_rank1(found)


# The same waits, read from dumps as faulthandler writes them (the unit level).
ALGOS = str(Path(stacks.__file__).resolve().parent.parent / "runtime" / "algorithms")
STDLIB = sysconfig.get_paths()["stdlib"]


def _thread(*frames: tuple[str, int, str]) -> stacks.Thread:
    return stacks.Thread(1, True, tuple(stacks.Frame(*f) for f in frames))


def test_a_request_to_the_parameter_server_is_a_server_wait_not_a_collective() -> None:
    act = stacks.activity(
        _thread(
            (f"{STDLIB}/multiprocessing/connection.py", 440, "_poll"),
            (f"{ALGOS}/_ps.py", 330, "request"),
            (f"{ALGOS}/async_ps.py", 180, "step"),
            ("<cell>", 9, "<module>"),
        )
    )
    assert act.collective is None and not act.rendezvous
    assert act.server_wait == "a request to the parameter server"
    assert act.user_frame == stacks.Frame("<cell>", 9, "<module>")


def test_the_parameter_server_s_start_up_broadcast_is_a_collective() -> None:
    act = stacks.activity(
        _thread(
            ("/x/site-packages/torch/distributed/distributed_c10d.py", 1, "broadcast_object_list"),
            (f"{ALGOS}/_ps.py", 380, "start"),
            (f"{ALGOS}/async_ps.py", 140, "__init__"),
            ("<cell>", 4, "<module>"),
        )
    )
    assert act.collective == "broadcast_object_list" and act.server_wait is None


def test_a_worker_waiting_for_a_silent_server_names_the_server_rank_s_frame() -> None:
    from alchemist.diagnosis.collect import Liveness
    from alchemist.diagnosis.report import classify

    asking = stacks.Activity(
        stacks.Frame("<cell>", 9, "<module>"),
        None,
        False,
        None,
        None,
        "a request to the parameter server",
    )
    spinning = stacks.Activity(
        stacks.Frame("<cell>", 3, "spin"), None, False, None, stacks.Frame("<cell>", 3, "spin")
    )
    kind, headline = classify(
        job_id="j1",
        state="running",
        reason=None,
        world_size=2,
        liveness={r: Liveness(r, "running", 100 + r) for r in range(2)},
        acts={0: spinning, 1: asking},
        stall=None,
        advanced=[],
    )
    assert kind == "missing_rank"
    assert headline.startswith(
        "rank 1 waits for the parameter server's reply (from the cell (line 9))"
    )
    assert "rank 0 is in `spin` (cell line 3)" in headline


def test_horovod_s_optimizer_step_waits_in_hvd_allreduce() -> None:
    hvd = "/x/site-packages/horovod/torch"
    act = stacks.activity(
        _thread(
            (f"{hvd}/mpi_ops.py", 1260, "synchronize"),
            (f"{hvd}/optimizer.py", 284, "synchronize"),
            (f"{hvd}/optimizer.py", 333, "step"),
            ("<cell>", 15, "<module>"),
        )
    )
    assert act.collective == "hvd.allreduce"
    act = stacks.activity(
        _thread(
            (f"{hvd}/mpi_ops.py", 1260, "synchronize"),
            (f"{hvd}/mpi_ops.py", 880, "broadcast_"),
            ("/x/site-packages/horovod/torch/functions.py", 60, "broadcast_parameters"),
            ("<cell>", 5, "<module>"),
        )
    )
    assert act.collective == "hvd.broadcast_parameters"
