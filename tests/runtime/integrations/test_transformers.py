"""A Transformers ``Trainer`` cell on a model built from a small config (no downloaded
weights) under ``%%alchemist_distributed -n 2``: a real 2-rank job (gloo, CPU)."""

from __future__ import annotations

from typing import Any

from alchemist.job.spec import JobState
from tests.support.ecosystem import only_job, steps_of

TRAIN = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=64):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 16), generator=g)
    def __len__(self):
        return len(self.ids)
    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}

model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
args = TrainingArguments(
    output_dir="hf-out", max_steps=4, per_device_train_batch_size=4, logging_steps=1,
    report_to="none", save_strategy="no", use_cpu=True, disable_tqdm=True,
)
trainer = Trainer(model=model, args=args, train_dataset=Tokens())
result = trainer.train()
world, global_step = trainer.args.world_size, result.global_step
"""


def test_a_transformers_trainer_cell_runs_as_a_job_with_its_logs_as_curves(ip: Any) -> None:
    ip.run_cell_magic(
        "alchemist_distributed", "-n 2 --name transformers -o world,global_step", TRAIN
    )
    job = only_job()
    assert job.status().state == JobState.SUCCEEDED
    assert (ip.user_ns["world"], ip.user_ns["global_step"]) == (2, 4)  # one DDP run of 2
    # What the Trainer logs at each logging step, under its own names.
    for name in ("loss", "learning_rate", "grad_norm"):
        assert steps_of(job, name) == [1, 2, 3, 4], name
