"""The interactive notebook runs top to bottom in a real kernel, small.

As papermill does, the test puts a cell with smaller values right after the cell tagged
``parameters``, runs the whole notebook with nbclient (a real session of two local
engines, a real promoted batch job), and checks what a reader sees and, from a last cell
added for the test, the numbers behind it.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

from alchemist import client

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "04_interactive.ipynb"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

REPORT = """
import json
print(json.dumps({"session": session.id, "batch": batch.id, "gap": gap,
                  "accuracy": session_accuracy, "points": len(session_curve[0])}))
"""


def test_the_interactive_notebook_trains_in_a_session_and_promotes(tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "the notebook needs exactly one cell tagged 'parameters'"
    nb.cells.insert(tagged[0] + 1, new_code_cell("EPOCHS = 1", metadata={"tags": ["injected"]}))
    nb.cells.append(new_code_cell(REPORT))
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    report = json.loads("".join(o.get("text", "") for o in nb.cells.pop().outputs))

    text = "".join(
        o.get("text", "") or str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    )
    assert f"session {report['session']}: 2 ranks ready" in text
    assert "[rank 0] rank 0 of 2: 674 training images" in text
    assert "[rank 1] rank 1 of 2: 674 training images" in text
    # Each %%alchemist_px cell shows its ranks' lines in one rank-output widget, whose
    # display the cell's end updated with their text: what nbconvert and a notebook
    # opened without widget state show. None of them came as printed streams.
    px = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%%alchemist_px")]
    widgets = [
        [o for o in c.outputs if o.output_type == "display_data" and WIDGET_VIEW in o.data]
        for c in px
    ]
    assert [len(w) for w in widgets] == [1] * len(px) and len(px) == 4
    first = widgets[0][0].data["text/plain"].splitlines()
    assert "[rank 0] rank 0 of 2: 674 training images" in first
    assert "[rank 1] rank 1 of 2: 674 training images" in first
    evaluated = widgets[3][0].data["text/plain"]  # the --targets 0 cell
    assert "[rank 0] test accuracy after" in evaluated and "[rank 1]" not in evaluated
    streams = "".join(o.get("text", "") for c in px for o in c.outputs if o.output_type == "stream")
    assert "674 training images" not in streams and "test accuracy" not in streams
    # two training cells of one epoch each: two points, logged by every rank
    assert report["points"] == 2
    assert "[rank 0] Out: " in text and "[rank 1] test accuracy" not in text
    assert report["accuracy"] > 0.8
    assert "cell #" not in text  # every cell worked: promote left none out
    assert f"batch job {report['batch']}: succeeded" in text
    assert f"test accuracy after {2 * 22} steps" in text  # the batch job's rank 0
    assert report["gap"] < 1e-6  # the batch job logged the session's curve
    assert any(
        "image/png" in o.get("data", {})
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
    )
    states = {j.id: (j.to_dict()["kind"], j.status().state.value) for j in client.jobs()}
    assert states == {
        report["session"]: ("session", "succeeded"),
        report["batch"]: ("batch", "succeeded"),
    }
