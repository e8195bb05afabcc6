"""``alchemist.restore()`` loads checkpoints with torch's safe loader unless told otherwise.

Real parts: real torch (``torch.save`` / ``torch.load``), the real checkpoint helpers
against a real job directory (``ALCHEMIST_JOB_DIR`` set as a job's ranks have it), and
one real local job (torchrun, two processes) for the message a user sees in a job. No
stand-in.
"""

from __future__ import annotations

import pathlib
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import alchemist
from alchemist.errors import CheckpointError
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import JobState
from alchemist.runtime.context import context

OPT_OUT = "if you trust the file, call alchemist.restore(weights_only=False)"


@pytest.fixture
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[JobDir]:
    """This process is rank 0 of a world of 1 in a job whose directory is ``job_dir``."""
    jd = JobDir(tmp_path / "job").create()
    monkeypatch.setenv("ALCHEMIST_JOB_DIR", str(jd.root))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ALCHEMIST_JOB_ID"):
        monkeypatch.delenv(var, raising=False)
    context.cache_clear()
    yield jd
    context.cache_clear()


class Marker:
    """A plain user class: not one of the types the safe loader rebuilds."""

    def __init__(self, value: int) -> None:
        self.value = value


class WritesAFile:
    """Unpickling this runs ``Path(path).write_text("ran")``: the shape of a real attack."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (pathlib.Path.write_text, (pathlib.Path(self.path), "ran"))


def test_model_and_optimizer_state_dicts_restore(job_dir: JobDir) -> None:
    """What training cells save (model and optimizer state, a scheduler, the step)
    loads with the default safe loader and resumes training."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.99))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for step in range(3):
        opt.zero_grad()
        model(torch.randn(5, 4)).sum().backward()
        opt.step()
        sched.step()
        state = {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(),
            "epoch": step,
            "loss": 0.25,
        }
        alchemist.save_checkpoint(state, step)

    ckpt = alchemist.restore()

    assert ckpt is not None and ckpt["step"] == 2 and ckpt["state"]["epoch"] == 2
    model2 = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt2 = torch.optim.Adam(model2.parameters(), lr=1e-3)
    model2.load_state_dict(ckpt["state"]["model"])
    opt2.load_state_dict(ckpt["state"]["optimizer"])
    for a, b in zip(model.parameters(), model2.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert opt2.param_groups[0]["betas"] == (0.9, 0.99)
    assert opt2.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]


def test_a_custom_object_is_refused_in_one_line_and_loads_with_the_opt_out(
    job_dir: JobDir,
) -> None:
    alchemist.save_checkpoint({"w": torch.ones(2), "note": Marker(7)}, 5)

    with pytest.raises(CheckpointError) as refused:
        alchemist.restore()

    message = str(refused.value)
    assert "\n" not in message
    assert f"it uses {Marker.__module__}.Marker, which the safe loader does not load" in message
    assert "ckpt-000000005.pt" in message and message.endswith(OPT_OUT)
    assert isinstance(refused.value.__cause__, pickle.UnpicklingError)

    ckpt = alchemist.restore(weights_only=False)
    assert ckpt is not None and ckpt["step"] == 5
    assert isinstance(ckpt["state"]["note"], Marker) and ckpt["state"]["note"].value == 7


def test_a_malicious_checkpoint_does_not_run_code_by_default(
    job_dir: JobDir, tmp_path: Path
) -> None:
    """Someone who can write the job's checkpoint folder drops a pickle whose loading
    writes a file; the default restore refuses it and the file is never written. The
    opt-out runs it, which shows the payload is live (the test could fail)."""
    marker = tmp_path / "payload-ran"
    alchemist.save_checkpoint({"w": torch.ones(2)}, 1)
    torch.save(
        {"step": 2, "state": {"w": WritesAFile(marker)}}, job_dir.checkpoints / "ckpt-000000002.pt"
    )

    with pytest.raises(
        CheckpointError, match=r"it uses \S+, which the safe loader does not load"
    ) as refused:
        alchemist.restore()
    assert str(refused.value).endswith(OPT_OUT)
    assert not marker.exists()

    alchemist.restore(weights_only=False)
    assert marker.read_text() == "ran"


CELL = """
import alchemist, torch
from fractions import Fraction
alchemist.save_checkpoint({"w": torch.ones(1), "ratio": Fraction(1, 3)}, 0)
ckpt = alchemist.restore()
"""


def test_in_a_job_the_refusal_is_the_job_s_one_line_reason() -> None:
    """A real two-rank local job: both ranks refuse the checkpoint; the job fails with
    the one line as its reason, not a torch traceback."""
    job = alchemist.submit(CELL, workers=2, namespace={})
    status = job.wait(timeout=180)
    assert status.state == JobState.FAILED, job.logs()
    assert status.reason is not None
    assert "it uses fractions.Fraction" in status.reason and OPT_OUT in status.reason
    assert "Weights only load failed" not in job.logs()
