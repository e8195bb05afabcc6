"""A Lightning ``Trainer`` cell under ``%%alchemist_distributed -n 2``, as it was
prototyped (no devices, no strategy, no logger of Alchemist's named): real 2-rank jobs on
the local backend (gloo, CPU)."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.core.error import UsageError

from alchemist.job.spec import JobState
from tests.support.ecosystem import only_job, steps_of

MODULE = """
import torch
import lightning as L

class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

g = torch.Generator().manual_seed(0)
x = torch.randn(128, 8, generator=g)
data = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8
)
"""

TRAIN = (
    MODULE
    + """
model = Regressor()
trainer = L.Trainer(
    accelerator="cpu", max_steps=6, log_every_n_steps=1, logger=False,
    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    {extra}
)
trainer.fit(model, data)
cluster = type(trainer.strategy.cluster_environment).__name__
world, steps = trainer.world_size, trainer.global_step
weights = {{k: v.detach().clone() for k, v in model.state_dict().items()}}
"""
)


def test_a_lightning_trainer_cell_runs_on_the_jobs_ranks_with_live_curves(ip: Any) -> None:
    ip.run_cell_magic(
        "alchemist_distributed",
        "-n 2 --name lightning -o cluster,world,steps,weights",
        TRAIN.format(extra=""),
    )
    job = only_job()
    assert job.status().state == JobState.SUCCEEDED
    # Lightning took the job's ranks as its cluster (torchrun's variables): it launched
    # nothing, and devices="auto" became the job's 2 ranks (DDP, not one device each).
    assert ip.user_ns["cluster"] == "TorchElasticEnvironment"
    assert ip.user_ns["world"] == 2 and ip.user_ns["steps"] == 6
    assert ip.user_ns["weights"]["net.weight"].shape == (1, 8)  # copied back
    # self.log("train_loss") is a curve in the job's metrics, under Lightning's name.
    assert steps_of(job, "train_loss") == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('devices=2, strategy="ddp_notebook",', 'Trainer\\(strategy="ddp_notebook"\\) starts its'),
        ("devices=1,", "asks for 1 processes, but this job has 2 ranks: pass devices=2"),
    ],
)
def test_a_trainer_that_cannot_run_in_a_job_fails_in_one_line_naming_the_fix(
    ip: Any, extra: str, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        ip.run_cell_magic("alchemist_distributed", "-n 2", TRAIN.format(extra=extra))
    assert only_job().status().state == JobState.FAILED


def test_the_trainer_is_left_alone_outside_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the plain kernel (the prototype) the keywords pass through unchanged."""
    from alchemist.runtime.integrations.lightning import check_and_adjust

    monkeypatch.delenv("ALCHEMIST_JOB_ID", raising=False)
    kwargs = {"strategy": "ddp_notebook", "devices": 2}
    assert check_and_adjust(kwargs) == kwargs
