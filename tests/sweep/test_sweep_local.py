"""A user sweeps a cell on the local backend: real jobs, a real driver, Optuna's pruner.

Every trial is a real job (one rank, so two fit this 2-core machine at once). The cell
logs a made-up accuracy that peaks at ``lr = 0.3``, so which trials the median pruner
must stop is known: the others fall behind the first finished trials at early steps.
(A trial that ends before the driver reads its first step has a result and is not
pruned, so the bad ones run long enough to be seen: ten times slower a step.)
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError

from alchemist import client
from alchemist.job import config
from alchemist.sweep import api as sweeps
from alchemist.sweep.driver import driver_running
from alchemist.widgets.sweep import SweepMonitor

CELL = """
import time
import alchemist
lr = 0.1
for step in range(6):
    val_acc = 1 - abs(lr - 0.3) * (step + 1)
    alchemist.log(step, val_acc=val_acc)
    time.sleep(STEP_S * (1 if val_acc > 0 else 10))  # a bad trial runs long: it is pruned
model = {"lr": lr}
"""


def _sweep_dirs() -> list[Path]:
    return sorted(config.sweeps_root().iterdir())


def test_a_sweep_stops_the_bad_trials_and_names_the_best(ip: Any, capsys: Any) -> None:
    """The grid runs two at once; the trials that fall behind the finished ones are
    cancelled with the pruner's reason, the best setting is said in one line and its
    trial's outputs come back."""
    ip.user_ns["STEP_S"] = 0.4
    ip.run_cell_magic(
        "alchemist_sweep",
        "-n 1 --param lr=0.3,0.25,0.9,1.5 --objective val_acc --parallel 2 --prune-after 2"
        " -o model --name lrs",
        CELL,
    )
    out = capsys.readouterr().out
    assert "best: lr=0.3 (val_acc=1 at step 5, trial 0, job " in out
    assert "copied back from the best trial: model" in out
    assert ip.user_ns["model"] == {"lr": 0.3}
    sweep = sweeps.sweeps()[0]
    assert sweep.state()["state"] == "succeeded"
    trials = {t["params"]["lr"]: t for t in sweep.trials()}
    assert [trials[lr]["state"] for lr in (0.3, 0.25)] == ["complete", "complete"]
    for lr in (0.9, 1.5):  # behind the median of the finished trials at their first step
        t = trials[lr]
        assert t["state"] == "pruned", t
        assert t["step"] < 5
        status = client.attach(t["job_id"]).status()
        assert status.state.value == "cancelled"
        assert status.reason.startswith(f"pruned by sweep {sweep.id} at step ")
        assert "worse than the median" in status.reason
        assert f"trial {t['number']} (lr={lr:.4g}) pruned" in out
    # the trials running at once share the machine's cores instead of each taking all
    threads = max(1, len(os.sched_getaffinity(0)) // 2)
    assert client.attach(trials[0.3]["job_id"]).spec.env["OMP_NUM_THREADS"] == str(threads)
    assert all(t["finished"] > t["started"] for t in trials.values())  # the jobs' own times
    # each trial is an ordinary job, named for the sweep
    names = sorted(j.name for j in client.jobs())
    assert names == ["lrs-t0", "lrs-t1", "lrs-t2", "lrs-t3"]
    assert _hparams_runs(sweep.dir.tensorboard) == {
        "trial-0": {"lr": 0.3},
        "trial-1": {"lr": 0.25},
        "trial-2": {"lr": 0.9},
        "trial-3": {"lr": 1.5},
    }
    # what the cell showed: every curve, the best one thick, the pruned ones faded
    monitor = SweepMonitor(sweep)
    page = monitor._repr_html_()
    assert page.count("<polyline") == 4
    assert page.count("stroke-width='3.0'") == 1 and page.count("stroke='#c7c7c7'") == 2
    assert page.index("<td>lr=0.3</td>") < page.index("<td>lr=0.25</td>")  # best first
    assert "best: lr=0.3" in repr(monitor)
    fig = monitor.widget.children[3]
    assert len(fig.marks) == 4 and [len(m.x) for m in fig.marks][:2] == [6, 6]


def _hparams_runs(root: Path) -> dict[str, dict[str, Any]]:
    """The trials' settings as TensorBoard's HParams plugin reads them from the files."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams.metadata import SESSION_START_INFO_TAG
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    runs = {}
    for events in root.glob("trial-*/events.out.tfevents.*"):
        for event in EventFileLoader(str(events)).Load():
            for v in event.summary.value:
                if v.tag == SESSION_START_INFO_TAG:
                    data = HParamsPluginData.FromString(v.metadata.plugin_data.content)
                    hp = data.session_start_info.hparams
                    runs[events.parent.name] = {k: hp[k].number_value for k in hp}
    return runs


def test_a_sweep_outlives_its_driver_and_resumes_where_it_was(ip: Any, capsys: Any) -> None:
    """Killing the driver (the machine restarted, say) loses nothing: attaching starts
    it again, it follows the trial that was running, and no setting runs twice."""
    ip.user_ns["STEP_S"] = 0.3
    sweep = ip.run_cell_magic(
        "alchemist_sweep",
        "-n 1 --param lr=0.3,0.2,0.1 --objective val_acc --pruner none --detach",
        CELL,
    )
    assert f"%alchemist_sweep attach {sweep.id}" in capsys.readouterr().out
    deadline = time.monotonic() + 60
    while not any(t["state"] == "running" for t in sweep.trials()):
        assert time.monotonic() < deadline, sweep.trials()
        time.sleep(0.2)
    pid = sweep.dir.read_state()["driver_pid"]
    os.kill(pid, signal.SIGKILL)
    while driver_running(sweep.dir):
        time.sleep(0.05)
    assert "driver is not running" in sweep.state()["reason"]
    again = ip.run_line_magic("alchemist_sweep", f"attach {sweep.id}")
    out = capsys.readouterr().out
    assert "its driver was not running; resumed" in out
    assert again.state()["state"] == "succeeded"
    trials = again.trials()
    assert sorted(t["params"]["lr"] for t in trials) == [0.1, 0.2, 0.3]
    assert all(t["state"] == "complete" for t in trials)
    assert len({t["job_id"] for t in trials}) == 3 == len(client.jobs())
    assert again.best()["params"] == {"lr": 0.3}


def test_an_objective_never_logged_stops_the_sweep_in_one_line(ip: Any) -> None:
    ip.user_ns["STEP_S"] = 0.0
    cell = CELL + "\n# the cell logs val_acc; the sweep asks for val_accuracy\n"
    with pytest.raises(UsageError) as e:
        ip.run_cell_magic(
            "alchemist_sweep",
            "-n 1 --param lr=0.1,0.2 --objective val_accuracy --no-widget",
            cell,
        )
    message = str(e.value)
    assert "\n" not in message
    assert "the objective val_accuracy was never logged (it logged: val_acc)" in message
    assert sweeps.sweeps()[0].trials()[0]["state"] == "failed"


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("--param momentum=0.9,0.99 --objective val_acc", "the cell never sets momentum"),
        ("--param lr=0.1,0.2", "needs --objective METRIC"),
        ("--param lr=0.1,0.2 --objective loss", "the cell never mentions loss"),
        ("--param lr=range(1000) --param model=range(1000) --objective val_acc", "1,000,000"),
        ("-n 2 --param lr=0.1,0.2 --parallel 2 --objective val_acc", "--parallel 2: this machine"),
        ("--param lr=loguniform(0,1) --objective val_acc", "needs bounds above 0"),
    ],
)
def test_bad_input_is_one_line_and_starts_nothing(
    ip: Any, line: str, says: str, monkeypatch: Any
) -> None:
    monkeypatch.setenv("ALCHEMIST_LOCAL_CPU_SLOTS", "2")  # this machine's cores, as in CI
    with pytest.raises(UsageError) as e:
        ip.run_cell_magic("alchemist_sweep", line, CELL)
    assert says in str(e.value)
    assert "\n" not in str(e.value)
    assert _sweep_dirs() == [] and client.jobs() == []


def test_a_dry_run_on_kubernetes_shows_the_trials_and_a_trials_manifests(
    ip: Any, capsys: Any, monkeypatch: Any
) -> None:
    """Rendered as on a cluster (the notebook pod's settings), checked without one."""
    monkeypatch.setenv("ALCHEMIST_K8S_PVC", "home")
    ip.user_ns["STEP_S"] = 0.0
    ip.run_cell_magic(
        "alchemist_sweep",
        "--backend kubernetes --image alchemist/worker:test -n 2 --param lr=0.3,0.1 --param bs=32,64 --objective val_acc"
        " --parallel 4 --dry-run",
        CELL.replace("lr = 0.1", "lr = 0.1\nbs = 16"),
    )
    out = capsys.readouterr().out
    assert "sweep sweep: 4 trials (grid search), 4 at once" in out
    assert "t3: lr=0.1, bs=64" in out
    assert "each trial is a job like this one (with lr=0.3, bs=32)" in out
    assert "kind: Job" in out  # the first trial's manifests
    assert _sweep_dirs() == [] and client.jobs() == []
