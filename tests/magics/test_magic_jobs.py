"""The core path in a real IPython shell with real torchrun jobs on the local backend."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from IPython.core.error import UsageError

import alchemist
from alchemist.job.spec import JobState

PREP = """
import torch
def make_data(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return x, x @ torch.tensor([1.0, -2.0, 3.0, 0.5])
lr = 0.05
"""

TRAIN = """
import torch, torch.distributed as dist
import alchemist
ctx = alchemist.context()
probe = torch.tensor([float(ctx.rank + 1)])
if dist.is_initialized():
    dist.all_reduce(probe)               # 1 + 2 on two ranks
x, y = make_data()                       # a function from an earlier cell
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=lr)
model, opt = alchemist.distribute(model, opt)
loader = alchemist.shard(torch.utils.data.TensorDataset(x, y), batch_size=16)
losses = []
for epoch in range(4):
    loader.sampler.set_epoch(epoch)
    for xb, yb in loader:
        loss = ((model(xb).squeeze(-1) - yb) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
    alchemist.log(epoch, loss=loss.item())
    print(f"epoch {epoch} loss {loss.item():.4f}")
world = ctx.world_size
allreduced = probe.item()
"""


def _only_job() -> alchemist.Job:
    jobs = alchemist.jobs()
    assert len(jobs) == 1
    return jobs[0]


def test_cell_trains_as_two_communicating_ranks_and_copies_outputs(
    ip: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell(PREP)
    ip.run_cell_magic(
        "alchemist_distributed", "-n 2 --name digits -o losses,world,allreduced", TRAIN
    )
    out = capsys.readouterr().out
    # Each rank's output is shown in the cell, prefixed by its rank, then a status line.
    assert "[rank 0] epoch 3 loss" in out and "[rank 1] epoch 3 loss" in out
    assert "succeeded" in out
    assert ip.user_ns["world"] == 2
    assert ip.user_ns["allreduced"] == 3.0  # the ranks really communicated
    losses = ip.user_ns["losses"]
    assert losses[-1] < losses[0] / 4  # and the model learned

    job = _only_job()
    assert job.name == "digits" and job.status().state == JobState.SUCCEEDED
    events = job.metrics()
    assert sorted({e["rank"] for e in events}) == [0, 1]
    assert [e["step"] for e in events if e["rank"] == 0] == [0, 1, 2, 3]


def test_same_cell_runs_in_the_plain_kernel_at_world_size_one(ip: Any) -> None:
    ip.run_cell(PREP)
    result = ip.run_cell(TRAIN)
    assert result.success, result.error_in_exec
    assert ip.user_ns["world"] == 1 and ip.user_ns["allreduced"] == 1.0
    assert ip.user_ns["losses"][-1] < ip.user_ns["losses"][0]


def test_distribute_checks_options_in_the_plain_kernel_too(ip: Any) -> None:
    """The prototype cell (world size 1) fails on a typo, before it becomes a job."""
    from alchemist.errors import SpecError

    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(SpecError, match="unknown option\\(s\\) blok_size for algorithm 'bmuf'"):
        alchemist.distribute(model, opt, algorithm="bmuf", blok_size=4)
    with pytest.raises(SpecError, match="algorithm 'hogwild' is unknown"):
        alchemist.distribute(model, opt, algorithm="hogwild")
    assert alchemist.distribute(model, opt, algorithm="bmuf", block_size=4) == (model, opt)


def test_an_algorithm_chosen_in_code_ignores_the_jobs_options_for_another(ip: Any) -> None:
    """``--algorithm-option`` values belong to ``--algorithm``; code may pick another."""
    cell = (
        "import torch, alchemist\n"
        "m = torch.nn.Linear(2, 1)\n"
        "m, o = alchemist.distribute(m, torch.optim.SGD(m.parameters(), lr=0.1),"
        " algorithm='bmuf', block_size=2)\n"
        "kind, block = type(o).__name__, o.block_size\n"
    )
    ip.run_cell_magic(
        "alchemist_distributed", "-n 2 --algorithm-option bucket_cap_mb=4 -o kind,block", cell
    )
    assert (ip.user_ns["kind"], ip.user_ns["block"]) == ("BMUFOptimizer", 2)


def test_dry_run_prints_the_command_env_and_bundle_and_submits_nothing(
    ip: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell(PREP)
    ip.run_cell_magic("alchemist_distributed", "-n 3 --env FOO=bar --dry-run", TRAIN)
    out = capsys.readouterr().out
    assert "torch.distributed.run" in out and "--nproc-per-node=3" in out
    assert "FOO=bar" in out and "ALCHEMIST_JOB_ID=" in out
    assert "make_data" in out and "function" in out and "lr" in out
    assert alchemist.jobs() == []


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("-n 0", "workers must be a positive integer"),
        ("--bogus", "unrecognized arguments"),
        ("-n two", "invalid int value"),
        ("--algorithm sgd", "algorithm 'sgd' is unknown"),
        ("--env NOVALUE", "--env expects KEY=VALUE"),
        ("--backend nosuch", "unknown backend 'nosuch'"),
        ("-o not-a-name", "is not a Python variable name"),
        (
            "--algorithm bmuf --algorithm-option blok_size=4",
            r"unknown option\(s\) blok_size for algorithm 'bmuf'; valid options: block_lr,",
        ),
        (
            "--algorithm easgd --algorithm-option moving_rate=2",
            r"easgd option moving_rate must be a number in \[0, 1\], got 2",
        ),
    ],
)
def test_bad_flags_are_one_usage_error_and_submit_nothing(ip: Any, line: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ip.run_cell_magic("alchemist_distributed", line, "print(1)")
    assert alchemist.jobs() == []


def test_unpicklable_variable_is_a_clear_error_and_nothing_is_submitted(ip: Any) -> None:
    ip.run_cell("import threading\nlock = threading.Lock()")
    with pytest.raises(UsageError, match=r"variable 'lock' \(lock\) cannot be sent to the workers"):
        ip.run_cell_magic("alchemist_distributed", "-n 2", "with lock:\n    print(1)")
    assert alchemist.jobs() == []


def test_syntax_error_is_a_clear_error_and_nothing_is_submitted(ip: Any) -> None:
    with pytest.raises(UsageError, match="syntax error in the cell at line 2"):
        ip.run_cell_magic("alchemist_distributed", "-n 2", "x = 1\ny = (x +\n")
    assert alchemist.jobs() == []


CRASHY = """
import os, torch, alchemist
ctx = alchemist.context()
ckpt = alchemist.restore()
start = ckpt["step"] + 1 if ckpt else 0
w = ckpt["state"]["w"] if ckpt else torch.zeros(1)
print(f"starting at step {start} (restart {alchemist.restart_count()})")
for step in range(start, 6):
    w += 1
    alchemist.log(step, w=w.item())
    alchemist.save_checkpoint({"w": w}, step)
    if step == 3 and alchemist.restart_count() == 0 and ctx.rank == 1:
        os._exit(7)          # a worker crashes on the first attempt
final_w = w.item()
"""


def test_crashed_worker_restarts_and_resumes_from_its_checkpoint(
    ip: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    ip.run_cell_magic("alchemist_distributed", "-n 2 --max-restarts 1 -o final_w", CRASHY)
    job = _only_job()
    st = job.status()
    assert st.state == JobState.SUCCEEDED and st.restarts == 1
    assert ip.user_ns["final_w"] == 6.0  # counted once per step: no step lost or repeated
    rank0 = job.logs(rank=0)
    assert "starting at step 0 (restart 0)" in rank0
    assert "starting at step 4 (restart 1)" in rank0


@pytest.mark.parametrize(
    ("failure", "cause"),
    [
        ("1 / 0", "ZeroDivisionError: division by zero"),
        ("raise SystemExit(3)", r"\[alchemist\] the code called sys.exit\(3\)"),
        ("import sys; sys.exit('no data in /mnt/x')", "no data in /mnt/x"),
    ],
)
def test_failure_without_restarts_reports_the_cause(ip: Any, failure: str, cause: str) -> None:
    with pytest.raises(
        UsageError, match=rf"failed after [0-9.]+ s: rank 1 failed: {cause} \(full logs"
    ):
        ip.run_cell_magic(
            "alchemist_distributed",
            "-n 2",
            f"import alchemist\nif alchemist.context().rank == 1:\n    {failure}\n",
        )
    job = _only_job()
    assert job.status().state == JobState.FAILED
    assert job.status().reason is not None and job.status().reason.startswith("rank 1 failed: ")


@pytest.mark.parametrize("start", ["cold", "warm"])
def test_cancel_stops_every_process(ip: Any, alchemist_home: Any, start: str) -> None:
    from tests.conftest import processes_under

    job = ip.run_cell_magic(
        "alchemist_distributed",
        "-n 2 --detach" + (" --no-warm" if start == "cold" else ""),
        "import time, alchemist\nprint('up', flush=True)\ntime.sleep(600)",
    )
    deadline = time.monotonic() + 120
    while job.logs().count("up") < 2:
        assert time.monotonic() < deadline, job.logs()
        time.sleep(0.2)
    running = {p.pid for p in processes_under(job.job_dir.root)}
    ranks = {int(f.read_text()) for f in job.job_dir.pids.glob("rank-*.pid")}
    supervisor = int((job.job_dir.launcher_pid).read_text())
    assert len(ranks) == 2 and ranks | {supervisor} <= running
    # cold: torchrun too; warm: the ranks are the pool's
    assert ((job.job_dir.pids / "torchrun.pid").exists()) == (start == "cold")
    ip.run_line_magic("alchemist_cancel", job.id)
    assert job.status().state == JobState.CANCELLED
    assert processes_under(job.job_dir.root) == []
    job.cancel()  # idempotent
    assert job.status().state == JobState.CANCELLED


def test_timeout_stops_the_job_and_says_why(ip: Any) -> None:
    with pytest.raises(UsageError, match=r"timed out after 3 s"):
        ip.run_cell_magic(
            "alchemist_distributed", "-n 1 --timeout 3", "import time\ntime.sleep(600)"
        )


def test_cli_submits_a_script_and_lists_logs_and_metrics(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from alchemist.cli import main

    script = tmp_path / "train.py"
    script.write_text(
        "import alchemist\nctx = alchemist.context()\n"
        "for s in range(3):\n    alchemist.log(s, loss=1.0 / (s + 1))\n"
        "if __name__ == '__main__':\n    print('hello from', ctx.rank)\n"
    )
    assert main(["submit", str(script), "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert "[rank 0] hello from 0" in out and "[rank 1] hello from 1" in out
    job = _only_job()
    assert job.name == "train"
    assert main(["jobs"]) == 0
    assert job.id in capsys.readouterr().out
    assert main(["logs", job.id, "--rank", "1"]) == 0
    assert "hello from 1" in capsys.readouterr().out
    assert main(["metrics", job.id]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(events) == 6 and {e["rank"] for e in events} == {0, 1}
    # --cursor says where to go on from; --since that cursor prints only what is new
    assert main(["metrics", job.id, "--cursor"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 6
    cursor = captured.err.strip().removeprefix("cursor: ")
    assert main(["metrics", job.id, "--since", cursor]) == 0
    assert capsys.readouterr().out == ""
    assert main(["metrics", job.id, "--since", "rank0"]) == 2
    assert "is not a metrics cursor" in capsys.readouterr().err
    assert main(["cancel", "nosuchjob"]) == 2
    assert "no job 'nosuchjob'" in capsys.readouterr().err
    # A misspelt algorithm option is one line at submit, before anything runs.
    assert main(["submit", str(script), "--algorithm-option", "bucket_cap=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("alchemist: error: unknown option(s) bucket_cap for algorithm 'sync'")
    assert len(err.splitlines()) == 1
    assert [j.id for j in alchemist.jobs()] == [job.id]


def test_cli_output_into_a_closed_pipe_is_not_a_traceback(tmp_path: Any) -> None:
    """``alchemist jobs | head -1``: the reader leaves early; the CLI exits quietly.

    The pipe's read end is closed before the CLI starts, so every write fails (no race).
    """
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "alchemist.cli", "jobs"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141


def test_the_cells_output_lines_must_be_one_or_more(ip: Any) -> None:
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="must be 1 or more, got -1"):
        ip.run_cell_magic("alchemist_distributed", "-n 1 --max-output-lines -1", "x = 1")
    with pytest.raises(UsageError, match="expected a whole number, got 'many'"):
        ip.run_cell_magic("alchemist_distributed", "-n 1 --max-output-lines many", "x = 1")


def test_a_run_line_runs_its_script_as_the_job(
    ip: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``%run train.py --lr 0.1`` as a distributed cell's one line runs the script as
    the job, with its arguments (it was refused with "move it to another cell"); a
    ``%run`` among other lines says what to write instead."""
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('argv', sys.argv[1:], flush=True)\n")
    ip.run_cell_magic("alchemist_distributed", "-n 2", f"%run {script} --lr 0.1")
    out = capsys.readouterr().out
    assert "[rank 1] argv ['--lr', '0.1']" in out and "succeeded" in out, out
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match=r"make `%run script.py ARGS` the cell's only line"):
        ip.run_cell_magic("alchemist_distributed", "-n 2", f"x = 1\n%run {script}\n")
