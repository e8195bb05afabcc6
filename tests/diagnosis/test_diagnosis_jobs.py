"""Hang diagnosis of real jobs: real torchrun, gloo, 2 ranks on this machine.

Real parts: the jobs are submitted through ``alchemist.client.submit`` to the local
backend (supervisor, torchrun, one process per rank), the ranks install the real hooks,
the collector signals the real rank processes and reads what faulthandler wrote. The
only thing changed for speed is the stall threshold's 30 s floor (1 s here, set on the
module in this test process) and the watchdog's 60 s floor (``ALCHEMIST_WATCHDOG_S`` in the
environment the job's launcher and ranks inherit).
Every job is cancelled at the end; the suite's autouse fixture fails a test that leaves
a process behind. Waits poll for a condition with a deadline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from alchemist import cli, client
from alchemist.diagnosis import progress, report
from alchemist.job.spec import JobState
from alchemist.runtime import hooks
from tests.support.diagnose import MISSING, diagnose_until, line_of, logged, wait_for


def test_a_missing_rank_is_named_with_its_frame_within_seconds(
    submit: Callable[..., client.Job],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = submit(MISSING)
    wait_for(
        lambda: logged(job, 0, "rank 0 ready") and logged(job, 1, "rank 1 ready"), 120, "ready"
    )
    state_before = job.job_dir.read_state()
    t0 = time.monotonic()
    found = diagnose_until(job, "missing_rank")
    assert time.monotonic() - t0 < 5.0
    assert found["elapsed_s"] < 3.0, found["elapsed_s"]
    sleep_line, reduce_line = line_of(MISSING, "time.sleep(600)"), line_of(MISSING, "all_reduce")
    assert found["headline"] == (
        f"rank 1 has not reached all_reduce; it is in `load_batch` (cell line {sleep_line});"
        f" rank 0 waits in all_reduce from the cell (line {reduce_line})"
    )
    rank0, rank1 = found["ranks"]
    assert rank0["answered"] and rank1["answered"] and not found["partial"]
    assert rank0["activity"]["collective"] == "all_reduce"
    assert rank1["activity"]["collective"] is None
    assert rank1["code"] == "time.sleep(600)"
    assert (rank0["step"], rank1["step"]) == (9, 4)
    assert [g["ranks"] for g in found["groups"]] == [[0], [1]]
    json.dumps(found)  # one JSON-serialisable report

    # Diagnosis never changes the job's state.
    assert job.status().state == JobState.RUNNING
    assert job.job_dir.read_state() == state_before

    # The stall note names the laggard (the 30 s floor is 1 s here).
    monkeypatch.setattr(progress, "MIN_STALL_S", 1.0)
    note = wait_for(lambda: job.to_dict()["stalled"], 15, "the stall note")
    assert "rank 1 at step 4" in note and "rank 0 at 9" in note
    assert job.status().state == JobState.RUNNING

    # The CLI shows the same, from the same report.
    assert cli.main(["status", job.id]) == 0
    assert "rank 1 at step 4" in json.loads(capsys.readouterr().out)["stalled"]
    assert cli.main(["jobs"]) == 0
    assert f"job {job.id} stalled: no rank advanced" in capsys.readouterr().out
    assert cli.main(["diagnose", job.id]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("rank 1 has not reached all_reduce")
    assert lines[1].startswith("  rank 0  running  step 9") and "in all_reduce" in lines[1]
    assert lines[2].startswith("  rank 1  running  step 4") and "`load_batch`" in lines[2]
    assert cli.main(["diagnose", job.id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["classification"] == "missing_rank"


def test_the_magics_print_the_headline_a_line_per_rank_and_the_stall(
    submit: Callable[..., client.Job],
    ip: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = submit(MISSING)
    wait_for(
        lambda: logged(job, 0, "rank 0 ready") and logged(job, 1, "rank 1 ready"), 120, "ready"
    )
    diagnose_until(job, "missing_rank")
    capsys.readouterr()
    ip.run_line_magic("alchemist_diagnose", job.id)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("rank 1 has not reached all_reduce; it is in `load_batch`")
    assert [line.split()[:2] for line in lines[1:3]] == [["rank", "0"], ["rank", "1"]]
    ip.run_line_magic("alchemist_diagnose", f"{job.id} --json")
    assert json.loads(capsys.readouterr().out)["job_id"] == job.id
    monkeypatch.setattr(progress, "MIN_STALL_S", 1.0)
    wait_for(job.stalled, 15, "the stall note")
    ip.run_line_magic("alchemist_jobs", "")
    assert f"job {job.id} stalled: no rank advanced" in capsys.readouterr().out


def test_a_rank_spinning_in_c_code_that_holds_the_gil_still_yields_its_stack(
    submit: Callable[..., client.Job], tmp_path: Path
) -> None:
    """Rank 1 runs a catastrophic ``re`` match (C code that never releases the GIL);
    a ticker thread in the same rank stops writing, which proves the GIL is held."""
    cell = (
        "import re, threading, time, torch, torch.distributed as dist\n"
        "from pathlib import Path\n"
        "rank = dist.get_rank()\n"
        "def tick():\n"
        "    while True:\n"
        "        Path(f'{TICK}-{rank}').write_text(str(time.monotonic()))\n"
        "        time.sleep(0.01)\n"
        "threading.Thread(target=tick, daemon=True).start()\n"
        "while not Path(f'{TICK}-{rank}').exists():\n"
        "    time.sleep(0.01)\n"
        "print(f'rank {rank} ready', flush=True)\n"
        "if rank == 1:\n"
        "    re.match(r'(a+)+b', 'a' * 64)\n"
        "dist.all_reduce(torch.ones(1))\n"
    )
    job = submit(cell, namespace={"TICK": str(tmp_path / "tick")})
    wait_for(
        lambda: logged(job, 0, "rank 0 ready") and logged(job, 1, "rank 1 ready"), 120, "ready"
    )
    tick = tmp_path / "tick-1"
    found = diagnose_until(job, "missing_rank")
    frozen = tick.read_text()
    time.sleep(0.3)
    assert tick.read_text() == frozen, "rank 1's ticker ran: its GIL was not held"
    rank1 = found["ranks"][1]
    assert rank1["answered"] and rank1["stacks_from"] == "signal"
    assert rank1["activity"]["user_frame"] == {
        "file": "<cell>",
        "line": line_of(cell, "re.match"),
        "function": "<module>",
    }
    assert rank1["code"] == "re.match(r'(a+)+b', 'a' * 64)"
    assert "rank 1 has not reached all_reduce; it is in the cell" in found["headline"]


def test_the_watchdog_writes_stacks_with_no_request(
    submit: Callable[..., client.Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a 1 s watchdog, a rank that stops calling alchemist.log writes its stacks by
    itself. The report of a backend that cannot signal its ranks (Kubernetes) reads
    them: here the local job's directory stands in for the pods' shared one."""
    cell = (
        "import time, alchemist\n"
        "def stuck():\n"
        "    time.sleep(600)\n"
        "alchemist.log(0, loss=1.0)\n"
        "stuck()\n"
    )
    monkeypatch.setenv(hooks.WATCHDOG_VAR, "1")  # the ranks inherit the launcher's environment
    job = submit(cell)
    paths = [hooks.watchdog_path(job.job_dir, r) for r in (0, 1)]
    wait_for(lambda: all(p.exists() and "stuck" in p.read_text() for p in paths), 120, "watchdog")
    for rank in (0, 1):
        assert hooks.stacks_path(job.job_dir, rank).read_text() == "", "nobody asked"
    st = job.status()
    found = report.diagnose(
        job.job_dir,
        job_id=job.id,
        state=st.state.value,
        reason=st.reason,
        world_size=2,
        backend="kubernetes",
        ask=False,  # read only what the watchdog wrote: no request file to answer
    )
    for entry in found["ranks"]:
        assert entry["stacks_from"] == "watchdog" and not entry["answered"]
        assert entry["activity"]["user_frame"]["function"] == "stuck"
    assert found["groups"][0]["ranks"] == [0, 1]  # the same stack, grouped
    assert job.status().state == JobState.RUNNING


def test_a_rank_waiting_at_the_checkpoint_barrier_is_not_called_hung(
    submit: Callable[..., client.Job],
) -> None:
    cell = (
        "import time, torch.distributed as dist, alchemist\n"
        "def evaluate():\n"
        "    time.sleep(600)\n"
        "rank = dist.get_rank()\n"
        "print(f'rank {rank} ready', flush=True)\n"
        "if rank == 1:\n"
        "    evaluate()\n"
        "alchemist.save_checkpoint({'w': 1}, step=1)\n"
    )
    job = submit(cell)
    wait_for(
        lambda: logged(job, 0, "rank 0 ready") and logged(job, 1, "rank 1 ready"), 120, "ready"
    )
    found = diagnose_until(job, "checkpoint_barrier")
    assert found["headline"] == (
        "rank 0 waits at the checkpoint barrier (Alchemist's own wait, not a hang) for the"
        f" others: rank 1 has not reached barrier; it is in `evaluate` (cell line"
        f" {line_of(cell, 'time.sleep(600)')})"
    )
    assert found["ranks"][0]["activity"]["alchemist_wait"] == "the checkpoint barrier"


def test_a_killed_rank_is_named_with_its_signal(submit: Callable[..., client.Job]) -> None:
    """torchrun ends the job at once when a rank dies: the report of the failed job
    names the rank and the signal, and the rank is ``dead``."""
    cell = (
        "import os, signal, time, torch, torch.distributed as dist\n"
        "if dist.get_rank() == 1:\n"
        "    time.sleep(0.5)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "dist.all_reduce(torch.ones(1))\n"
    )
    job = submit(cell)
    assert job.wait(timeout=120).state == JobState.FAILED
    found = job.diagnose()
    assert found["classification"] == "not_running"
    assert found["headline"] == (
        f"job {job.id} failed: rank 1 was killed by signal 9 (SIGKILL) (out of memory?)"
    )
    rank1 = found["ranks"][1]
    assert rank1["liveness"] == "dead"
    assert rank1["exit"] == "was killed by signal 9 (SIGKILL) (out of memory?)"


def test_a_rank_that_never_joins_is_waited_for_by_name(
    submit: Callable[..., client.Job], tmp_path: Path
) -> None:
    """Rank 1's interpreter stops before Alchemist's runtime starts in it (as a pod that is
    never scheduled, or a node that never boots): a ``sitecustomize`` on the job's
    ``PYTHONPATH`` sleeps when ``RANK`` is 1, so rank 1 never writes its pid file nor
    reaches ``init_process_group``, where rank 0 waits for it. (A job that sets
    ``PYTHONPATH`` starts its ranks cold, as fresh interpreters: never from the warm
    pool, whose ranks imported everything already.)"""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, time\nif os.environ.get('RANK') == '1':\n    time.sleep(600)\n"
    )
    job = submit("print('never here')\n", env={"PYTHONPATH": str(site)})
    found = diagnose_until(job, "rendezvous_wait", timeout=120)
    assert found["headline"] == ("waiting for rank 1 to join: rank 0 waits in init_process_group")
    rank0, rank1 = found["ranks"]
    assert rank0["answered"] and rank0["activity"]["rendezvous"]
    assert rank0["line"].endswith("in init_process_group")
    assert rank1["liveness"] == "not started" and not rank1["answered"]
    assert job.status().state == JobState.RUNNING


DDP_STOPPED = """
import os, signal, torch, torch.distributed as dist, alchemist
from torch.nn.parallel import DistributedDataParallel as DDP
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(100000):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    if rank == 1 and step == 20:
        print("rank 1 stops", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    opt.zero_grad()
    loss.backward()
    opt.step()
    alchemist.log(step, loss=loss.item())
"""


def test_a_rank_stopped_inside_ddp_training_is_the_one_named(
    submit: Callable[..., client.Job],
) -> None:
    """Rank 1 is stopped (SIGSTOP) between its forward and backward pass; rank 0 waits in
    DDP's gradient all-reduce, which runs in autograd's engine (its Python stack shows
    only ``backward``). The headline names the stopped rank, and rank 0's wait, not a
    user deadlock of the healthy rank."""
    job = submit(DDP_STOPPED)
    wait_for(lambda: logged(job, 1, "rank 1 stops"), 120, "rank 1 to stop itself")
    found = diagnose_until(job, "missing_rank", timeout=30)
    headline = found["headline"]
    assert headline.startswith(
        "rank 1 is stopped (SIGSTOP, or a debugger; SIGCONT resumes it) and has not reached"
    ), headline
    assert "rank 0 waits in " in headline and "the gradient all-reduce of backward" in headline
    assert "user" not in found["classification"]
