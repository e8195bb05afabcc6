"""The algorithm and large-batch notebooks run top to bottom in a real kernel, small.

Each notebook has one code cell tagged ``parameters``. As papermill does, the test puts
a cell with smaller values right after it, then runs the whole notebook with nbclient
on the real local backend: in 02 every run is a real job; 03 trains its sweep in the
kernel and checks it against one real 2-worker job. It checks what a reader sees (each
job's line, the plots, the tables) and, from a last cell added for the test, the
numbers behind the tables.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

from alchemist import client

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

try:  # what the notebook checks (it also asks for a dry run, which finds horovodrun)
    import horovod.torch  # noqa: F401

    HAVE_HOROVOD = True
except Exception:  # not installed, or a build that does not load
    HAVE_HOROVOD = False


def run_notebook(
    path: Path, parameters: str, report: str, cwd: Path
) -> tuple[nbformat.NotebookNode, Any]:
    """Run ``path`` with ``parameters`` injected after its parameters cell.

    Returns the executed notebook and the JSON that the added last cell ``report``
    prints.
    """
    nb = nbformat.read(path, as_version=4)
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name} needs exactly one cell tagged 'parameters'"
    nb.cells.insert(tagged[0] + 1, new_code_cell(parameters, metadata={"tags": ["injected"]}))
    nb.cells.append(new_code_cell(f"import json\nprint(json.dumps({report}))"))
    NotebookClient(
        nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    ).execute()
    last = nb.cells.pop()
    return nb, json.loads("".join(o.get("text", "") for o in last.outputs))


def text_of(nb: nbformat.NotebookNode) -> str:
    # one output a line at least: a figure's text/plain has no newline of its own
    return "\n".join(
        o.get("text", "") or str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    )


def pngs(nb: nbformat.NotebookNode) -> list[str]:
    return [
        o["data"]["image/png"]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "image/png" in o.get("data", {})
    ]


def assert_all_succeeded(expected: int) -> None:
    jobs = client.jobs()
    assert len(jobs) == expected
    assert {j.status().state.value for j in jobs} == {"succeeded"}, [
        (j.name, j.status().reason) for j in jobs
    ]


@pytest.mark.slow
def test_algorithms_notebook_runs_each_algorithm_as_a_job_and_plots(tmp_path: Path) -> None:
    data_file = tmp_path / "02.json"
    nb, runs = run_notebook(
        NOTEBOOKS / "02_algorithms.ipynb",
        'ALGORITHMS = ["sync", "async", "bmuf", "easgd", "horovod"]\n'
        "EPOCHS = 2\nSEEDS = [0]\nEVAL_EVERY = 5\n"
        'WORKER_COUNTS = [1, 2]\nSCALING_ALGORITHMS = ["sync", "async"]\nSCALING_SEEDS = [0]\n'
        "SIM_WORKERS = [1, 4]\nSIM_LR_FACTORS = [1.0]\nSIM_MOMENTA = [0.9]\n"
        "SIM_TUNE_SEEDS = [100]\nSIM_SEEDS = [0, 1]\nSIM_EPOCHS = 2\nTARGET = 0.8\n"
        "VALIDATION_LRS = [0.025, LR]\n"
        f"BOOTSTRAP = 100\nDATA_FILE = {str(data_file)!r}",
        'runs.drop(columns=["correct", "per_rank"]).to_dict("records")',
        tmp_path,
    )
    shown = text_of(nb)
    # Horovod runs when it is installed; otherwise the notebook says so and goes on.
    trained = ["sync", "async", "bmuf", "easgd"] + (["horovod"] if HAVE_HOROVOD else [])
    for name in trained:
        assert re.search(rf"^{name} +seed 0  job j\w+ succeeded in", shown, re.M), shown
    if not HAVE_HOROVOD:
        assert "horovod  skipped: Horovod cannot run here" in shown
    # the throughput sweep, then the validation's real async job at its other rate
    for line in ("sync     x1", "sync     x2", "async    x2", "async    x2 lr 0.025"):
        assert re.search(rf"^{line} seed 0  job j\w+ succeeded in", shown, re.M), shown
    assert_all_succeeded(len(trained) + 4)
    assert len(pngs(nb)) == 2  # accuracy against examples and time; workers (sim and real)
    assert "final test accuracy" in shown and "examples/s, all ranks" in shown
    assert "scaling efficiency" in shown and "validation (" in shown
    assert re.search(r"measured at 2 workers: compute [0-9.]+ ms a step", shown), shown

    assert [r["algorithm"] for r in runs] == trained
    steps = 2 * ((1437 + 1) // 2 // 32)  # 2 epochs of 719 samples a rank, batch 32
    for r in runs:
        assert r["steps"] == steps, r
        assert 0.5 < r["final_accuracy"] <= 1.0, r  # chance is 0.1; 2 epochs reach ~0.8
        assert r["examples_per_s"] > 0 and r["train_seconds"] > 0, r
    (async_run,) = [r for r in runs if r["algorithm"] == "async"]
    assert 0 <= async_run["staleness"] < 10  # measured, and small with 2 workers

    # the data file: every run, its per-image answers, the simulator, the provenance
    data = json.loads(data_file.read_text())
    assert {
        "provenance",
        "parameters",
        "jobs",
        "scaling",
        "validation",
        "sim_runs",
        "sim_table",
    } <= set(data)
    assert data["provenance"]["commit"] and data["provenance"]["cpu"]
    assert data["provenance"]["packages"]["torch"]
    assert len(data["jobs"]) == len(trained) and len(data["jobs"][0]["correct"]) == 360
    assert {(v["algorithm"], v["workers"]) for v in data["validation"]} == {
        ("async", 2),
        ("sync", 2),
    }
    assert len(data["sim_runs"]) == 3 * 2 * 2  # 3 arms x 2 worker counts x 2 seeds
    for r in data["sim_table"]:
        acc = r["accuracy"]
        assert acc["lo"] <= acc["value"] <= acc["hi"], r
    # the conclusion is generated from the data file, with its intervals
    (conclusion,) = [c for c in nb.cells if "conclusion" in c.metadata.get("tags", [])]
    md = "".join(o["data"]["text/markdown"] for o in conclusion.outputs if "data" in o)
    assert "Accuracy at 2 workers" in md and "The simulator against the real jobs" in md
    number = r"[+-]\d+\.\d\d"
    assert re.search(rf"async minus sync is {number} \[{number}, {number}\] points", md), md


@pytest.mark.slow
def test_large_batch_notebook_sweeps_checks_a_job_and_plots(tmp_path: Path) -> None:
    data_file = tmp_path / "03.json"
    nb, report = run_notebook(
        NOTEBOOKS / "03_large_batch.ipynb",
        "SEEDS = [0, 1]\nTEACHER_TRAIN = 4096\nTEACHER_EVAL = 1000\nBUDGET = 2**13\n"
        "BATCHES = [32, 256, 1024]\nREFERENCE_LRS = [0.1, 0.05]\nLR_POINTS = 2\n"
        "EVAL_POINTS = 6\nDIGITS_BUDGET = 2**11\nDIGITS_BATCHES = [16, 128]\n"
        "DIGITS_REFERENCE_LRS = [0.2, 0.1]\nABLATION_BATCH = 1024\n"
        "WARMUP_FRACTIONS = [0, 1 / 4]\nLARS_LRS = [16, 32]\nLAMB_LRS = [0.04, 0.08]\n"
        "CHECK_BATCH = 256\nCHECK_BUDGET = 2**11\nSMALL_BATCH = 256\nLARS_SMALL_LRS = [8]\n"
        "LAMB_SMALL_LRS = [0.02]\nEXTRA_BATCHES = [32, 256]\nEXTRA_LR_POINTS = 2\n"
        f"NOISE_SCALE_DRAWS = 4\nNOISE_SCALE_AT = [0.0, 1.0]\nDATA_FILE = {str(data_file)!r}",
        '{"table": teacher_table.to_dict("records"), "knee": int(teacher_knee),'
        ' "lr0": float(teacher_lr0), "check": check, "arms": list(ablation.arm),'
        ' "digits": digits_table.batch.tolist()}',
        tmp_path,
    )
    shown = text_of(nb)
    # the one real job: 2 workers, --global-batch 256, each rank 128 examples a step
    assert re.search(r"^check B=256  job j\w+ succeeded in", shown, re.M), shown
    assert_all_succeeded(1)
    check = report["check"]
    assert check["steps"] == 2**11 // 256
    # the job, the kernel's run and the stacked models train the same model
    assert check["max_diff_job"] < 1e-4 and check["max_diff_stacked"] < 1e-4, check
    assert check["test_job"] == pytest.approx(check["test_kernel"], abs=1e-3)
    assert check["test_stacked"] == pytest.approx(check["test_kernel"], abs=1e-3)
    assert len(pngs(nb)) == 3  # teacher sweep, digits sweep, mitigations

    table = report["table"]
    assert [r["batch"] for r in table] == [32, 256, 1024]
    assert report["lr0"] in (0.1, 0.05)  # the reference batch's best rate, from its grid
    for r in table:
        assert r["steps"] == 2**13 // r["batch"]  # a fixed budget: nothing dropped
        assert r["linear_lr"] == pytest.approx(report["lr0"] * r["batch"] / 32)
        assert r["tuned_lo"] <= r["tuned_test"] <= r["tuned_hi"] and 0 <= r["tuned_test"] <= 1, r
    assert report["knee"] in (32, 256, 1024)
    assert report["digits"] == [16, 128]
    assert report["arms"] == [
        "SGD, warmup 0 steps",
        "SGD, warmup 2 steps",
        "SGD + weight decay 0.0005",
        "LARS",
        "LARS + warmup 1 steps",
        "LAMB",
        "LAMB + warmup 1 steps",
        "LAMB, no trust ratio",
        "LARS, no weight decay",
        "LAMB, no weight decay",
    ]
    # the data file: every run, the knee by tolerance, the noise scale, the provenance
    data = json.loads(data_file.read_text())
    assert {"provenance", "parameters", "runs", "knee", "noise_scale", "ablation", "drops"} <= set(
        data
    )
    assert data["provenance"]["commit"] and data["provenance"]["packages"]["torch"]
    assert len(data["runs"]) == 5  # main, clean labels, smaller budget, both changed, digits
    for name, k in data["knee"].items():
        assert set(k["knee_by_tolerance"]) == {"0.005", "0.01", "0.02"}, name
        knees = list(k["knee_by_tolerance"].values())
        assert knees == sorted(knees), k  # a larger tolerance never gives a smaller knee
        assert k["linear_last_ok"] in (16, 32, 128, 256, 1024), k
    for rs in data["noise_scale"].values():
        assert [r["fraction"] for r in rs] == [0.0, 1.0]
    (conclusion,) = [c for c in nb.cells if "conclusion" in c.metadata.get("tags", [])]
    md = "".join(o["data"]["text/markdown"] for o in conclusion.outputs if "data" in o)
    assert "Headline: the linear scaling rule breaks down between batch" in md, md
    assert "The knee's sensitivity" in md and "Noise scale" in md and "Welch p" in md, md


def test_sweep_notebook_prunes_a_bad_rate_and_brings_the_best_back(tmp_path: Path) -> None:
    """A small learning-rate sweep of 06_sweep: three real trials one after the other;
    the rate that barely learns falls behind the two finished trials and is stopped.
    (Enough epochs that a trial runs a few seconds: one that ends before the driver
    reads it has a result and is not pruned.)"""
    nb, report = run_notebook(
        NOTEBOOKS / "06_sweep.ipynb",
        'LRS = "0.1,0.05,0.0003"\nBATCHES = "32"\nEPOCHS = 150\nPARALLEL = 1',
        '{"trials": trials.to_dict("records"), "best": s.best()}',
        tmp_path,
    )
    shown = text_of(nb)
    assert "lr=0.1 batch_size=32: validation accuracy" in shown  # the prototype, here
    assert re.search(r"best: lr=0\.(1|05), batch_size=32 \(val_acc=[0-9.]+ at step 149", shown)
    assert "copied back from the best trial: weights" in shown
    assert "test accuracy of the best trial's weights" in shown
    assert re.search(r"1 of 3 trials pruned; [0-9]+ trial-seconds run against about", shown)
    states = {t["lr"]: t["state"] for t in report["trials"]}
    assert states == {0.1: "complete", 0.05: "complete", 0.0003: "pruned"}, report
    assert report["best"]["params"]["lr"] in (0.1, 0.05)
    assert "pruned by sweep" in shown  # the attached view says why
