"""The notebook's own code travels: modules and packages beside the notebook, and data
files under its folder, reach the workers of a real 2-rank job on the local backend.

Before, ``from model import GPT`` in a notebook failed in the job with
``ModuleNotFoundError: No module named 'model'``: the bundle was unpickled before the
worker put the notebook's folder on ``sys.path``.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from alchemist import client
from alchemist.bundle import build_bundle
from alchemist.errors import BundleError
from alchemist.job.spec import JobState


@pytest.fixture
def notebook_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A notebook's folder as a kernel sees it: its cwd, and first on ``sys.path``."""
    nb = tmp_path / "project"
    (nb / "helpers").mkdir(parents=True)
    (nb / "data").mkdir()
    (nb / "model.py").write_text(
        textwrap.dedent("""
        class Scaler:
            def __init__(self, factor):
                self.factor = factor
            def __call__(self, v):
                return v * self.factor
        VERSION = "as submitted"
        """)
    )
    (nb / "helpers" / "__init__.py").write_text("")
    (nb / "helpers" / "numbers.py").write_text("def total(xs):\n    return sum(xs)\n")
    (nb / "data" / "numbers.txt").write_text("1\n2\n3\n")
    monkeypatch.chdir(nb)
    monkeypatch.syspath_prepend(str(nb))
    yield nb
    for name in ("model", "helpers", "helpers.numbers"):
        sys.modules.pop(name, None)


CELL = """
import torch.distributed as dist
from helpers.numbers import total
import model
with open("data/numbers.txt") as f:
    numbers = [int(line) for line in f]
result = scaler(total(numbers))      # an instance of model.Scaler from the notebook
version = model.VERSION
rank = dist.get_rank()
"""


def test_modules_packages_and_data_beside_the_notebook_reach_every_rank(
    notebook_dir: Path,
) -> None:
    import model  # the notebook imported it in an earlier cell

    ns = {"scaler": model.Scaler(10)}
    dry = client.submit(CELL, namespace=ns, dry_run=True, workers=2)
    assert "model.py" in dry.text and "helpers/numbers.py" in dry.text
    assert "data/numbers.txt" not in dry.text  # data is read where it is, not copied

    job = client.submit(CELL, namespace=ns, workers=2, outputs=["result", "version"])
    # The user edits model.py while the job runs: the job keeps the code it was given.
    (notebook_dir / "model.py").write_text("raise ImportError('edited after submit')\n")
    status = job.wait(timeout=240)
    assert status.state == JobState.SUCCEEDED, job.logs()
    assert job.outputs() == {"result": 60, "version": "as submitted"}
    assert (job.job_dir.bundle / "files" / "helpers" / "numbers.py").is_file()


def test_a_script_finds_the_modules_of_its_own_folder(
    notebook_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = notebook_dir / "train.py"
    script.write_text("from model import Scaler\nassert Scaler(2)(21) == 42\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # `alchemist submit project/train.py` from another folder
    job = client.submit(script, workers=2)
    status = job.wait(timeout=240)
    assert status.state == JobState.SUCCEEDED, job.logs()
    assert (job.job_dir.bundle / "files" / "model.py").is_file()


def test_installed_and_standard_modules_do_not_travel(notebook_dir: Path) -> None:
    import numpy as np

    bundle = build_bundle(
        "import json, torch\nfrom model import Scaler\nprint(np.zeros(2), json, torch)",
        {"np": np},
        max_value_bytes=1 << 20,
    )
    assert sorted(bundle.files) == ["model.py"]


def test_own_code_over_the_limit_is_one_line_naming_the_module(notebook_dir: Path) -> None:
    (notebook_dir / "helpers" / "weights.bin").write_bytes(b"\0" * 4096)
    with pytest.raises(
        BundleError, match=r"'helpers' .* over the .* limit .*nothing was submitted"
    ):
        build_bundle("import helpers", {}, max_value_bytes=2048)
