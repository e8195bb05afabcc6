"""``notebooks/05_ecosystem.ipynb`` runs top to bottom in a real kernel, small: its
Lightning and Transformers cells are real 2-rank jobs on the local backend."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

NOTEBOOK = Path(__file__).resolve().parents[3] / "notebooks" / "05_ecosystem.ipynb"


def test_the_ecosystem_notebook_runs_its_lightning_and_transformers_jobs(tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    [at] = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    nb.cells.insert(at + 1, new_code_cell("STEPS = 20"))
    report = (
        "import json, alchemist\n"
        "print(json.dumps({j.name: [j.status().state.value,"
        " sorted({k for e in j.metrics() for k in e['values']})] for j in alchemist.jobs()}))"
    )
    nb.cells.append(new_code_cell(report))
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    jobs = json.loads("".join(o.get("text", "") for o in nb.cells[-1].outputs))
    assert jobs["lightning"][0] == "succeeded" and "train_loss" in jobs["lightning"][1]
    assert jobs["transformers"][0] == "succeeded" and "loss" in jobs["transformers"][1]
    text = "\n".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )
    assert "Lightning trained on 2 ranks" in text
    assert "step  20  loss" in text  # the Trainer's history, copied back
