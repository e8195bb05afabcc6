"""One Horovod rank (run by ``horovodrun`` from test_algo_horovod.py).

usage: python hvd_worker.py DIGITS_FILE OUT_DIR
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from algo_harness import RankCtx, train_digits

from alchemist.runtime import algorithms


def main() -> None:
    torch.set_num_threads(1)
    data, out = sys.argv[1], Path(sys.argv[2])
    rank = int(os.environ["HOROVOD_RANK"])
    world = int(os.environ["HOROVOD_SIZE"])
    ctx = RankCtx(rank, world, int(os.environ["HOROVOD_LOCAL_RANK"]))

    # Two ranks on halves of a batch = one process on the whole batch (as for sync).
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    if rank == 1:
        with torch.no_grad():  # rank 0's parameters must be broadcast
            for p in model.parameters():
                p.add_(1.0)
    gen = torch.Generator().manual_seed(42)
    x, y = torch.randn(8, 5, generator=gen), torch.randint(0, 3, (8,), generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, opt = algorithms.get("horovod").wrap(model, opt, ctx)
    half = len(x) // world
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(
            model(x[rank * half : (rank + 1) * half]), y[rank * half : (rank + 1) * half]
        ).backward()
        opt.step()
    params = [p.detach().clone() for p in model.parameters()]
    result = {
        "params": params,
        "digits": train_digits(ctx, "horovod", data),
        "type": type(opt).__name__,
    }
    torch.save(result, out / f"rank-{rank}.pt")


if __name__ == "__main__":
    main()
