"""The algorithm and large-batch notebooks run top to bottom in a real kernel, small.

Each notebook has one code cell tagged ``parameters``. As papermill does, the test puts
a cell with smaller values right after it, then runs the whole notebook with nbclient
on the real local backend: every point is a real 2-worker job. It checks what a reader
sees (each job's line, the plot, the table) and, from a last cell added for the test,
the numbers behind the table.
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
    return "".join(
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
    nb, runs = run_notebook(
        NOTEBOOKS / "02_algorithms.ipynb",
        'ALGORITHMS = ["sync", "async", "bmuf", "easgd", "horovod"]\n'
        "EPOCHS = 2\nSEEDS = [0]\nEVAL_EVERY = 5",
        'runs.to_dict("records")',
        tmp_path,
    )
    shown = text_of(nb)
    # Horovod runs when it is installed; otherwise the notebook says so and goes on.
    trained = ["sync", "async", "bmuf", "easgd"] + (["horovod"] if HAVE_HOROVOD else [])
    for name in trained:
        assert re.search(rf"^{name} +seed 0  job j\w+ succeeded in", shown, re.M), shown
    if not HAVE_HOROVOD:
        assert "horovod  skipped: Horovod cannot run here" in shown
    assert_all_succeeded(len(trained))
    assert len(pngs(nb)) == 1  # the 2x2 figure
    assert "final test accuracy" in shown and "examples/s, all ranks" in shown

    assert [r["algorithm"] for r in runs] == trained
    steps = 2 * ((1437 + 1) // 2 // 32)  # 2 epochs of 719 samples a rank, batch 32
    for r in runs:
        assert r["steps"] == steps, r
        assert 0.5 < r["final_accuracy"] <= 1.0, r  # chance is 0.1; 2 epochs reach ~0.8
        assert r["examples_per_s"] > 0 and r["train_seconds"] > 0, r
    (async_run,) = [r for r in runs if r["algorithm"] == "async"]
    assert 0 <= async_run["staleness"] < 10  # measured, and small with 2 workers


@pytest.mark.slow
def test_large_batch_notebook_runs_each_batch_and_rule_as_a_job_and_plots(
    tmp_path: Path,
) -> None:
    nb, table = run_notebook(
        NOTEBOOKS / "03_large_batch.ipynb",
        'GLOBAL_BATCHES = [64, 512]\nRULES = ["linear", "lars"]\nEPOCHS = 3\nSEEDS = [0]',
        'table.to_dict("records")',
        tmp_path,
    )
    shown = text_of(nb)
    for rule in ("linear", "lars"):
        for batch in (64, 512):
            assert re.search(rf"^{rule} +B= +{batch}  job j\w+ succeeded in", shown, re.M), shown
    assert_all_succeeded(4)
    assert len(pngs(nb)) == 1  # accuracy against the global batch

    points = {(r["rule"], r["batch"]): r for r in table}
    assert set(points) == {("linear", 64), ("linear", 512), ("lars", 64), ("lars", 512)}
    for (rule, batch), r in points.items():
        # --global-batch B on 2 workers: each rank trained on B / 2
        assert r["per_worker_batch"] == batch // 2, r
        assert r["steps"] == 3 * (719 // (batch // 2)), r
        assert r["peak_lr"] == pytest.approx((0.05 if rule == "linear" else 1.0) * batch / 32)
        assert 0.0 <= r["accuracy_min"] <= r["accuracy_mean"] <= r["accuracy_max"] <= 1.0
    assert points["linear", 64]["accuracy_mean"] > 0.8  # 3 epochs at the tuned rate learn
