"""The quickstart notebook runs top to bottom in a real kernel, as a user would run it."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

from alchemist import client

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "01_quickstart.ipynb"


def test_quickstart_trains_locally_then_as_a_distributed_job(tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()

    def text(cell: nbformat.NotebookNode) -> str:
        return "".join(
            o.get("text", "") or str(o.get("data", {}).get("text/plain", "")) for o in cell.outputs
        )

    outputs = [text(c) for c in nb.cells if c.cell_type == "code"]
    assert any("test accuracy (prototype, 1 process)" in o for o in outputs)
    assert any("test accuracy (distributed, 2 processes)" in o for o in outputs)
    jobs = client.jobs()
    assert [j.name for j in jobs] == ["quickstart"]
    assert jobs[0].status().state.value == "succeeded"
    assert "quickstart" in outputs[-1]  # %alchemist_jobs lists it
