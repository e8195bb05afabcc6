"""Distributed algorithms benchmark: steps/s, time to 90 % test accuracy, sync exchange efficiency.

For each algorithm (``sync``, ``async``, ``bmuf``, ``easgd``, and ``horovod`` when
installed) N real ranks (torch's ``elastic_launch``, gloo on CPU; Horovod's own
``horovod.run`` with gloo) train the same MLP on scikit-learn's digits (80/20 split,
each rank its shard, batch 32 per rank, momentum SGD), with the algorithm's default
options. Rank 0 evaluates on the test set every ``--eval-every`` of its steps with its
clock paused; reported per algorithm: rank 0's steps/s, training time and steps to
reach 90 % test accuracy, and final accuracy. What rank 0 evaluates: its model (sync,
bmuf, horovod), the parameters it last pulled from the server (async), the centre
variable (easgd).

Exchange efficiency of ``sync`` (issue 4 target: ≥ 0.9 of raw), for MLPs of several
sizes (``--exchange-hidden``, default 64,1024,4096: 20 KB, 300 KB, 1.2 MB of gradients
a step), after the accuracy run, in the same processes: 30 rounds of 10 steps each of
four kinds, interleaved so load drift on a shared machine hits all alike (see
:func:`_exchange`): the step without exchange (``no_sync``), the DDP step, the same step
with the exchange written by hand (flatten, ``all_reduce``, divide, copy back), and
``all_reduce`` of the gradient bytes back to back. In-training rate = bytes per step /
(mean step time − mean step time without exchange); raw rate = bytes / mean
``all_reduce`` time. Printed: DDP over raw (the target) and DDP over hand-written (what
``sync`` costs over the plain alternative). Overlap of the all-reduce with the backward
pass can push a ratio above 1.

Run: ``.venv/bin/python benchmarks/algorithms.py [--workers 2] [--epochs 10]
[--hidden 64] [--algorithms sync,async,...] [--json out.json] [--smoke]``. On a machine
shared with other work the absolute numbers move with the load; compare within one run.
An algorithm whose run fails is counted and reported, and the others still run;
``--smoke`` (one epoch, sync and bmuf, one exchange size) is what the test suite runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ALL = ("sync", "async", "bmuf", "easgd", "horovod")
TARGET = 0.90


class _Ctx:
    def __init__(self, rank: int, world_size: int, local_rank: int) -> None:
        self.rank, self.world_size, self.local_rank, self.device = (
            rank,
            world_size,
            local_rank,
            "cpu",
        )


def _exchange(
    model: Any, opt: Any, xs: Any, ys: Any, rounds: int = 30, steps: int = 10
) -> dict[str, Any]:
    """In-training vs raw all-reduce rates of ``sync``, four kinds of step interleaved.

    Each of ``rounds`` rounds runs ``steps`` steps of each kind, ranks aligned by a
    barrier before each block, so load drift on a shared machine hits all four alike:

    - ``compute``: a DDP step under ``model.no_sync()`` (the same work, no exchange);
    - ``ddp``: a DDP step (what ``sync`` runs);
    - ``hand``: the ``compute`` step plus the exchange written by hand: flatten the
      gradients, ``all_reduce``, divide by the world size, copy back;
    - ``raw``: ``torch.distributed.all_reduce`` of the gradient bytes, back to back.

    Rates are bytes per second of total time (``bytes / (mean step − mean compute)``
    in training), so stalls count as they do for a training run. ``efficiency`` is the
    DDP rate over the raw rate (issue 4's target); ``vs_hand`` the DDP rate over the
    hand-written one: what ``sync`` costs over the plain alternative in a training loop.
    """
    import torch
    import torch.distributed as dist

    from alchemist.runtime.algorithms._base import flat as flatten
    from alchemist.runtime.algorithms._base import unflat_into

    params = [p for p in model.parameters() if p.requires_grad]
    nbytes = sum(p.numel() * p.element_size() for p in params)
    world = dist.get_world_size()
    batch = 32

    def one(k: int, kind: str) -> None:
        if kind == "raw":
            dist.all_reduce(flat)
            return
        i = (k * batch) % (len(xs) - batch)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xs[i : i + batch]), ys[i : i + batch]).backward()
        if kind == "hand":
            grads = flatten(p.grad for p in params)
            dist.all_reduce(grads)
            grads /= world
            unflat_into(grads, [p.grad for p in params])
        opt.step()

    def block(kind: str) -> float:
        dist.barrier()
        if kind in ("compute", "hand"):
            with model.no_sync():
                start = time.perf_counter()
                for k in range(steps):
                    one(k, kind)
        else:
            start = time.perf_counter()
            for k in range(steps):
                one(k, kind)
        return time.perf_counter() - start

    flat = torch.ones(nbytes // 4)
    kinds = ("compute", "ddp", "hand", "raw")
    for kind in kinds:  # warm every path (DDP rebuilds its buckets after step 1)
        block(kind)
    total = dict.fromkeys(kinds, 0.0)
    for _ in range(rounds):
        for kind in kinds:
            total[kind] += block(kind)
    n = rounds * steps
    mean = {kind: t / n for kind, t in total.items()}

    def rate(step: float) -> float:
        # A non-positive difference: the exchange was hidden (or lost in the noise).
        return nbytes / step if step > 0 else float("inf")

    inside = rate(mean["ddp"] - mean["compute"])
    hand = rate(mean["hand"] - mean["compute"])
    raw = rate(mean["raw"])
    return {
        "bytes_per_step": nbytes,
        "step_ms": {kind: 1e3 * t for kind, t in mean.items()},
        "in_training_bytes_per_s": inside,
        "hand_written_bytes_per_s": hand,
        "raw_bytes_per_s": raw,
        "efficiency": inside / raw,
        "vs_hand": inside / hand,
    }


def _exchanges(xs: Any, ys: Any, ctx: _Ctx, sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """:func:`_exchange` of a fresh ``sync``-wrapped MLP per hidden size.

    The ratio depends on the gradient size: for small gradients DDP's fixed per-step
    work (hooks, bucket bookkeeping) weighs against a tiny all-reduce; for larger ones
    the exchange can overlap the backward pass where cores are free for it.
    """
    import torch

    from alchemist.runtime import algorithms

    out = []
    for hidden in sizes:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10)
        )
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        model, opt = algorithms.get("sync").wrap(model, opt, ctx)
        out.append({"hidden": hidden, **_exchange(model, opt, xs, ys)})
    return out


def train(
    algorithm: str,
    data: str,
    epochs: int,
    hidden: int,
    eval_every: int,
    exchange_sizes: tuple[int, ...] = (),
) -> dict[str, Any] | None:
    """One rank's run; rank 0 returns the measurements."""
    import torch

    torch.set_num_threads(1)
    from alchemist.runtime import algorithms

    if algorithm == "horovod":
        import horovod.torch as hvd

        hvd.init()
        ctx = _Ctx(hvd.rank(), hvd.size(), hvd.local_rank())
    else:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        ctx = _Ctx(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
    x, y, xt, yt = torch.load(data)
    xs, ys = x[ctx.rank :: ctx.world_size], y[ctx.rank :: ctx.world_size]
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, opt = algorithms.get(algorithm).wrap(model, opt, ctx)
    plain = model.module if hasattr(model, "module") else model

    def evaluate() -> float:
        with torch.no_grad():
            if algorithm == "easgd":
                saved = [p.detach().clone() for p in plain.parameters()]
                centre = opt.centre()
                torch.nn.utils.vector_to_parameters(centre, plain.parameters())
                acc = float((plain(xt).argmax(1) == yt).float().mean())
                torch.nn.utils.vector_to_parameters(
                    torch.cat([s.reshape(-1) for s in saved]), plain.parameters()
                )
                return acc
            return float((plain(xt).argmax(1) == yt).float().mean())

    gen = torch.Generator().manual_seed(ctx.rank)
    steps, clock, curve = 0, 0.0, []
    batch = 32
    for _ in range(epochs):
        order = torch.randperm(len(xs), generator=gen)
        for i in range(0, len(xs) - batch + 1, batch):
            idx = order[i : i + batch]
            t0 = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xs[idx]), ys[idx]).backward()
            opt.step()
            clock += time.perf_counter() - t0
            steps += 1
            if ctx.rank == 0 and steps % eval_every == 0:
                curve.append((steps, clock, evaluate()))
    result: dict[str, Any] | None = None
    final = evaluate() if ctx.rank == 0 and algorithm != "easgd" else None
    exchange = _exchanges(xs, ys, ctx, exchange_sizes) if algorithm == "sync" else None
    finish = getattr(opt, "finish", None)
    if finish is not None:
        finish()
    if ctx.rank == 0:
        if algorithm == "easgd":  # after finish(), rank 0's model is the centre
            final = float((plain(xt).argmax(1) == yt).float().mean())
        hit = next(((s, t) for s, t, a in curve if a >= TARGET), None)
        result = {
            "algorithm": algorithm,
            "steps": steps,
            "train_seconds": clock,
            "steps_per_s": steps / clock,
            "steps_to_90": hit[0] if hit else None,
            "seconds_to_90": hit[1] if hit else None,
            "final_accuracy": final,
            "curve": curve,
            "mean_staleness": getattr(opt, "mean_staleness", None),
            "exchange": exchange,
        }
    if algorithm != "horovod":
        import torch.distributed as dist

        dist.destroy_process_group()
    return result


def run(
    algorithm: str,
    workers: int,
    data: str,
    epochs: int,
    hidden: int,
    eval_every: int,
    exchange_sizes: tuple[int, ...] = (),
) -> dict[str, Any]:
    args = (algorithm, data, epochs, hidden, eval_every, exchange_sizes)
    if algorithm == "horovod":
        import horovod.runner

        results = horovod.runner.run(
            train, args=args, np=workers, hosts=f"localhost:{workers}", use_gloo=True
        )
        return results[0]
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=workers,
        run_id=f"bench-{algorithm}",
        rdzv_backend="c10d",
        rdzv_endpoint="127.0.0.1:0",
        max_restarts=0,
        monitor_interval=0.5,
        start_method="spawn",
    )
    return elastic_launch(config, train)(*args)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--algorithms", default=",".join(ALL))
    parser.add_argument(
        "--exchange-hidden",
        default="64,1024,4096",
        help="hidden sizes of the MLPs whose sync exchange is measured",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that it runs")
    a = parser.parse_args()
    if a.smoke:
        a.epochs, a.eval_every, a.algorithms, a.exchange_hidden = 1, 5, "sync,bmuf", "64"
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import torch
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))
    x, y = x[perm], y[perm]
    n = int(0.8 * len(x))
    data = str(Path(tempfile.mkdtemp(prefix="alchemist-bench-")) / "digits.pt")
    torch.save((x[:n], y[:n], x[n:], y[n:]), data)

    chosen = [s.strip() for s in a.algorithms.split(",") if s.strip()]
    sizes = tuple(int(h) for h in a.exchange_hidden.split(",") if h.strip())
    results = []
    failed: list[str] = []
    for algorithm in chosen:
        if algorithm == "horovod":
            try:
                import horovod.torch  # noqa: F401
            except ImportError:
                print("horovod: skipped (not installed; run scripts/setup.d/50-horovod.sh)")
                continue
        try:
            r = run(algorithm, a.workers, data, a.epochs, a.hidden, a.eval_every, sizes)
        except Exception as e:  # counted and reported; the other algorithms still run
            failed.append(f"{algorithm}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            print(f"{algorithm:8s} FAILED ({failed[-1]})", flush=True)
            continue
        results.append(r)
        to90 = (
            f"{r['seconds_to_90']:.2f} s / {r['steps_to_90']} steps"
            if r["steps_to_90"]
            else "not reached"
        )
        extra = f"  staleness {r['mean_staleness']:.2f}" if r["mean_staleness"] is not None else ""
        print(
            f"{algorithm:8s} {r['steps_per_s']:8.1f} steps/s  to 90 %: {to90:24s}"
            f" final {r['final_accuracy']:.3f}{extra}",
            flush=True,
        )
        for e in r["exchange"] or []:
            print(
                f"{'':8s} sync exchange, hidden {e['hidden']}, {e['bytes_per_step']} B a step:"
                f" in training {e['in_training_bytes_per_s'] / 1e6:.1f} MB/s,"
                f" hand-written {e['hand_written_bytes_per_s'] / 1e6:.1f} MB/s,"
                f" raw all_reduce {e['raw_bytes_per_s'] / 1e6:.1f} MB/s:"
                f" efficiency {e['efficiency']:.2f} (target >= 0.9),"
                f" vs hand-written {e['vs_hand']:.2f}",
                flush=True,
            )
    print(f"failed runs: {len(failed)} of {len(results) + len(failed)}")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
