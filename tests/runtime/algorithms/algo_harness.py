"""Run a function on N real torch.distributed ranks (gloo over TCP on 127.0.0.1).

Each rank is a process started with the ``spawn`` method; it initialises the default
process group, runs ``fn(ctx, *args)``, finishes every wrapped optimizer (what the
runtime does after a cell), saves ``fn``'s result with ``torch.save`` and tears the
group down. :func:`run_ranks` waits with a deadline, kills every rank on timeout (a
test never leaves a process behind) and reports each rank's exit code and result.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RankCtx:
    """What an algorithm's ``wrap`` reads (the runtime's ``Context`` has the same fields)."""

    rank: int
    world_size: int
    local_rank: int
    device: Any = "cpu"


@dataclass
class RankResult:
    rank: int
    exitcode: int | None
    value: Any
    error: str | None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(
    fn: Callable[..., Any], rank: int, world: int, port: int, out: str, args: tuple[Any, ...]
) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        OMP_NUM_THREADS="1",
    )
    import torch
    import torch.distributed as dist

    from alchemist.runtime.algorithms import finish_all

    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        value = fn(RankCtx(rank, world, rank), *args)
        finish_all()
        torch.save({"value": value, "error": None}, Path(out) / f"rank-{rank}.pt")
    except BaseException:
        torch.save({"value": None, "error": traceback.format_exc()}, Path(out) / f"rank-{rank}.pt")
        raise
    finally:
        dist.destroy_process_group()
    # The rank is done and its result saved. Here rank 0 also hosts the TCP store
    # (tcp:// init), and about 1 exit in 12 aborted in the interpreter's teardown
    # ("terminate called without an active exception", SIGABRT) after everything had
    # succeeded: skip the teardown. (Jobs keep their store in torchrun's agent.)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(
    fn: Callable[..., Any], world: int, tmp: Path, *args: Any, timeout: float = 120.0
) -> list[RankResult]:
    """Run ``fn(ctx, *args)`` on ``world`` ranks; return every rank's exit code and result.

    ``fn`` must be importable (a module-level function). Raises ``TimeoutError`` (after
    killing every rank) if the ranks are not all done within ``timeout`` seconds.
    """
    import torch

    spawn = mp.get_context("spawn")
    port = free_port()
    out = tmp / f"ranks-{port}"
    out.mkdir(parents=True)
    procs = [
        spawn.Process(target=_entry, args=(fn, r, world, port, str(out), args), daemon=True)
        for r in range(world)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        if any(p.is_alive() for p in procs):
            raise TimeoutError(f"ranks still running after {timeout:.0f} s")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(10)
    results = []
    for r, p in enumerate(procs):
        path = out / f"rank-{r}.pt"
        saved = (
            torch.load(path, weights_only=False)
            if path.exists()
            else {"value": None, "error": None}
        )
        results.append(RankResult(r, p.exitcode, saved["value"], saved["error"]))
    return results


def ok(results: list[RankResult], ranks: list[int] | None = None) -> list[Any]:
    """The values of ``ranks`` (default all), asserting each exited 0 without error."""
    chosen = [r for r in results if ranks is None or r.rank in ranks]
    for r in chosen:
        assert r.exitcode == 0 and r.error is None, f"rank {r.rank} exited {r.exitcode}:\n{r.error}"
    return [r.value for r in chosen]


# -- the digits data set (scikit-learn's, real handwritten digits) -------------------------


def save_digits(path: Path) -> Path:
    """Write (x_train, y_train, x_test, y_test) to ``path`` (see :func:`digits`).

    Done once per session in the test process: importing scikit-learn in every rank
    would cost seconds per process on a loaded machine.
    """
    import torch

    torch.save(digits(), path)
    return path


def load_saved_digits(path: Path | str) -> tuple[Any, Any, Any, Any]:
    import torch

    return tuple(torch.load(path))  # type: ignore[return-value]


def digits() -> tuple[Any, Any, Any, Any]:
    """(x_train, y_train, x_test, y_test): a fixed 80/20 split, features scaled to [0, 1]."""
    import torch
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))
    x, y = x[perm], y[perm]
    n = int(0.8 * len(x))
    return x[:n], y[:n], x[n:], y[n:]


def digits_model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def accuracy(model: Any, x: Any, y: Any) -> float:
    import torch

    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def train_digits(
    ctx: RankCtx,
    algorithm: str,
    data: Path | str,
    *,
    epochs: int = 6,
    batch: int = 32,
    lr: float = 0.1,
    momentum: float = 0.9,
    **options: Any,
) -> dict[str, Any]:
    """Train the digits classifier on this rank's shard with ``algorithm``; rank 0 reports.

    The loop is the user's loop, unchanged: ``loss.backward(); optimizer.step()``.
    """
    import torch

    from alchemist.runtime import algorithms

    x, y, xt, yt = load_saved_digits(data)
    xs, ys = x[ctx.rank :: ctx.world_size], y[ctx.rank :: ctx.world_size]
    model = digits_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    model, opt = algorithms.get(algorithm).wrap(model, opt, ctx, **options)
    gen = torch.Generator().manual_seed(ctx.rank)
    steps = 0
    started = time.perf_counter()
    for _ in range(epochs):
        order = torch.randperm(len(xs), generator=gen)
        for i in range(0, len(xs) - batch + 1, batch):
            idx = order[i : i + batch]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
            steps += 1
    elapsed = time.perf_counter() - started
    finish = getattr(opt, "finish", None)
    if finish is not None:
        finish()
    return {
        "accuracy": accuracy(model, xt, yt),
        "steps": steps,
        "seconds": elapsed,
        "mean_staleness": getattr(opt, "mean_staleness", None),
        "max_staleness": getattr(opt, "max_staleness", None),
    }
