"""Reliability: how many runs whose work finished were reported failed.

Runs the same short DDP training N times through Alchemist (``alchemist.submit`` of a
cell, 2 workers, waited on from the client) and N times under plain ``torchrun
--standalone --nproc-per-node 2``, alternating, on the local machine (gloo, CPU). Each
rank writes a marker file as the last line of its work. A run "finished its work" when
both markers exist; it was "reported failed" when the job did not end ``succeeded``
(Alchemist) or torchrun exited non-zero (plain). Printed for each arm: runs, runs whose
work finished, finished runs reported failed (target for Alchemist: 0 in 200), and runs
that failed before finishing.

torch 2.13 with gloo aborts rank 0 at interpreter exit after the work is done in about
1 run in 20 under plain torchrun (``terminate called without an active exception``):
that is what the plain arm's count measures.

Then what the user is told of injected faults, ``--faults`` runs of each (Alchemist
only: plain torchrun says neither): a rank killed (SIGKILL) in the first attempt of a
``--max-restarts 1`` job (counted: the job succeeded; the restart's cause in its reason
names the killed rank), and a rank stopped (SIGSTOP) inside DDP training (counted: the
hang diagnosis' headline names the stopped rank; the classes of the headlines).

    python benchmarks/reliability.py [--runs 200] [--steps 20] [--faults 20] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

WORK = """
import os, torch
import torch.distributed as dist
torch.manual_seed(0)
model = torch.nn.Linear(32, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
{setup}
for step in range({steps}):
    x = torch.randn(16, 32)
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
with open(os.path.join({marks!r}, f"done-{{rank}}"), "w") as f:
    f.write("done")
"""

PLAIN_SETUP = """
dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.parallel.DistributedDataParallel(model)
"""

ALCHEMIST_SETUP = """
import alchemist
rank = alchemist.context().rank
model, opt = alchemist.distribute(model, opt)
"""


KILLED = """
import os, signal, torch, torch.distributed as dist, alchemist
model, opt = alchemist.distribute(torch.nn.Linear(8, 1), None)
first = os.environ["TORCHELASTIC_RESTART_COUNT"] == "0"
for step in range(10):
    if first and dist.get_rank() == 1 and step == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    model(torch.randn(4, 8)).sum().backward()
"""

STOPPED = """
import os, signal, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
model = DDP(torch.nn.Linear(32, 1))
for step in range(100000):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    if dist.get_rank() == 1 and step == 20:
        print("stopping", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    loss.backward()
"""


def run_killed() -> tuple[bool, bool, str]:
    """A rank killed in the first attempt: (succeeded, the cause names it, the reason)."""
    import alchemist

    job = alchemist.submit(KILLED, namespace={}, workers=2, max_restarts=1, name="killed")
    status = job.wait(timeout=300, poll=0.05)
    reason = status.reason or ""
    named = "rank 1 was killed by signal 9" in reason
    return status.state.value == "succeeded", named, reason[:160]


def run_stopped() -> tuple[bool, str]:
    """A rank stopped inside DDP training: (the headline names it, the headline)."""
    import time

    import alchemist

    job = alchemist.submit(STOPPED, namespace={}, workers=2, name="stopped")
    try:
        deadline = time.monotonic() + 120
        while "stopping" not in job.logs(rank=1):
            if time.monotonic() > deadline or job.status().state.is_terminal:
                return False, "rank 1 never reached its stop"
            time.sleep(0.1)
        report: dict = {}
        for _ in range(5):  # rank 0 may be a moment away from its all-reduce
            report = job.diagnose()
            if report["classification"] == "missing_rank":
                break
        headline = str(report.get("headline", ""))
        return headline.startswith(
            "rank 1 is stopped"
        ), f"{report.get('classification')}: {headline[:120]}"
    finally:
        job.cancel()


def _finished(marks: Path) -> bool:
    return all((marks / f"done-{r}").exists() for r in (0, 1))


def run_plain(workdir: Path, i: int, steps: int) -> tuple[bool, bool, str]:
    """One plain torchrun run: (work finished, reported failed, how)."""
    marks = workdir / f"plain-{i}"
    marks.mkdir()
    script = workdir / f"plain-{i}.py"
    script.write_text(
        WORK.format(setup=PLAIN_SETUP, steps=steps, marks=str(marks))
        + "dist.destroy_process_group()\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(script),
        ],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    how = ""
    if done.returncode:
        lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
        abort = any("terminate called" in ln for ln in lines)
        how = "teardown abort" if abort else (lines[-1][:160] if lines else "")
    return _finished(marks), done.returncode != 0, how


def run_alchemist(workdir: Path, i: int, steps: int) -> tuple[bool, bool, str]:
    """One run through Alchemist: (work finished, reported failed, how)."""
    import alchemist

    marks = workdir / f"alchemist-{i}"
    marks.mkdir()
    job = alchemist.submit(
        WORK.format(setup=ALCHEMIST_SETUP, steps=steps, marks=str(marks)),
        namespace={},
        workers=2,
        name="reliability",
    )
    status = job.wait(poll=0.05)
    failed = status.state.value != "succeeded"
    return _finished(marks), failed, (status.reason or "")[:160] if failed else ""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=200, help="runs of each arm")
    parser.add_argument("--steps", type=int, default=20, help="training steps per run")
    parser.add_argument("--faults", type=int, default=20, help="runs of each injected fault")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that it runs")
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.steps, args.faults = 2, 3, 1

    arms = {"alchemist": run_alchemist, "plain torchrun": run_plain}
    counts = {name: {"finished": 0, "lost": 0, "failed early": 0} for name in arms}
    notes: dict[str, list[str]] = {name: [] for name in arms}
    with tempfile.TemporaryDirectory(prefix="alchemist-bench-") as tmp:
        workdir = Path(tmp)
        os.environ["ALCHEMIST_HOME"] = str(workdir / "home")
        for i in range(args.runs):
            for name, arm in arms.items():
                try:
                    finished, failed, how = arm(workdir, i, args.steps)
                except Exception as e:  # the arm's harness broke: counted, not a crash
                    finished, failed, how = False, True, f"{type(e).__name__}: {e}"
                c = counts[name]
                c["finished"] += finished
                c["lost"] += finished and failed
                c["failed early"] += failed and not finished
                if failed:
                    notes[name].append(f"run {i + 1}: {how}")
            if (i + 1) % 10 == 0:  # the counts so far: a long run cut short still says something
                print(
                    f"{i + 1} runs of each arm done; finished work reported failed so far:"
                    f" alchemist {counts['alchemist']['lost']},"
                    f" plain torchrun {counts['plain torchrun']['lost']}",
                    flush=True,
                )
    print(f"reliability, {args.runs} runs of each arm, {args.steps} DDP steps, 2 processes:")
    print(f"  {'':16s} {'finished':>9s} {'finished, reported failed':>27s} {'failed early':>13s}")
    for name, c in counts.items():
        print(
            f"  {name:16s} {c['finished']:9d} {c['lost']:27d} {c['failed early']:13d}",
        )
    print(
        f"finished work reported failed: alchemist {counts['alchemist']['lost']}"
        f" of {args.runs} (target 0), plain torchrun {counts['plain torchrun']['lost']}"
        f" of {args.runs}"
    )
    for name, lines in notes.items():
        for line in lines[:20]:
            print(f"  {name} {line}")
    faults(args.faults)


def faults(runs: int) -> None:
    """The injected faults (see the module): counts, and what was said when it missed."""
    import collections

    killed = {"succeeded": 0, "cause named": 0}
    stopped = 0
    classes: collections.Counter[str] = collections.Counter()
    missed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="alchemist-faults-") as tmp:
        os.environ["ALCHEMIST_HOME"] = tmp
        for i in range(runs):
            try:
                ok, named, reason = run_killed()
            except Exception as e:  # the harness broke: counted as a miss, not a crash
                ok, named, reason = False, False, f"{type(e).__name__}: {e}"
            killed["succeeded"] += ok
            killed["cause named"] += named
            if not named:
                missed.append(f"killed run {i + 1}: {reason}")
            try:
                found, said = run_stopped()
            except Exception as e:
                found, said = False, f"{type(e).__name__}: {e}"
            stopped += found
            classes[said.split(":", 1)[0]] += 1
            if not found:
                missed.append(f"stopped run {i + 1}: {said}")
    print(f"faults, {runs} runs of each:")
    print(
        f"  a rank killed, --max-restarts 1: succeeded {killed['succeeded']} of {runs},"
        f" restart cause names the killed rank {killed['cause named']} of {runs}"
    )
    print(
        f"  a rank stopped inside DDP: the headline names it {stopped} of {runs}"
        f" (classes: {', '.join(f'{k} {v}' for k, v in sorted(classes.items()))})"
    )
    for line in missed[:20]:
        print(f"  {line}")


if __name__ == "__main__":
    main()
