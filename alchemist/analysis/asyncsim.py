"""An event-driven simulator of asynchronous (parameter-server) and synchronous SGD.

It trains a real model (a one-hidden-layer ReLU MLP in numpy, the digits classifier of
``notebooks/02_algorithms.ipynb``) while a clock models the workers, so staleness
arises from timing, as in a real cluster, not from a fixed delay.

**Async** (Downpour, as ``--algorithm async`` implements it): worker i computes a
gradient on the parameters it last received, which takes a compute time drawn from its
own speed (``Timing``); it pushes the gradient (``push_s``); the server applies the
gradients one at a time in arrival order (``apply_s`` each, momentum SGD on the
server) and answers with its new parameters (``pull_s``); the worker then starts its
next batch. The staleness of an update is the number of updates the server applied
between the version a gradient was computed on and the update itself.

**Sync**: every step, all N workers compute a gradient on the same parameters; the step
ends when the slowest is done plus a ring all-reduce of the gradient,
``2 (N - 1) alpha + 2 (N - 1) / N * bytes * beta`` seconds; the averaged gradient
(batch N x B) updates the model.

With one worker both reduce to plain sequential momentum SGD on the same batches.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Timing:
    """Seconds per event; every compute time is lognormal around the worker's mean.

    Attributes:
        compute_s: mean time for one worker to compute one batch's gradient.
        step_cv: coefficient of variation of one worker's compute times, step to step.
        worker_cv: coefficient of variation of the workers' mean speeds.
        push_s: time to send a gradient to the server.
        pull_s: time to receive the parameters back.
        apply_s: the server's time to apply one gradient (it applies one at a time).
        alpha_s: latency of one message of the ring all-reduce (sync).
        beta_s_per_byte: inverse bandwidth of the all-reduce (sync).
        worker_compute_s: measured, one per worker: each worker's own mean compute time
            (in place of ``compute_s`` and the drawn ``worker_cv`` speeds). On a real
            machine the workers differ systematically, not at random: the worker that
            hosts the parameter server (rank 0) exchanges faster and finishes first, and
            the others then train with one fewer peer, at lower staleness.
        worker_step_cv: measured, one per worker: each one's step-to-step CV.
        worker_exchange_s: measured, one per worker: each one's push plus pull.
    """

    compute_s: float
    step_cv: float = 0.1
    worker_cv: float = 0.0
    push_s: float = 0.0
    pull_s: float = 0.0
    apply_s: float = 0.0
    alpha_s: float = 0.0
    beta_s_per_byte: float = 0.0
    worker_compute_s: tuple[float, ...] = ()
    worker_step_cv: tuple[float, ...] = ()
    worker_exchange_s: tuple[float, ...] = ()

    def per_worker(
        self, workers: int, rng: np.random.Generator
    ) -> list[tuple[float, float, float, float]]:
        """(mean compute, step CV, push, pull) of each of ``workers`` workers: the measured
        ones where given (their number must be ``workers``; the exchange is split evenly
        into push and pull), else drawn speeds around ``compute_s`` and the shared push
        and pull."""
        given = [
            t for t in (self.worker_compute_s, self.worker_step_cv, self.worker_exchange_s) if t
        ]
        if not given:
            speed = _lognormal(rng, 1.0, self.worker_cv, workers)
            return [
                (self.compute_s * float(f), self.step_cv, self.push_s, self.pull_s) for f in speed
            ]
        if len(given) != 3 or any(len(t) != workers for t in given):
            raise ValueError(
                f"worker_compute_s, worker_step_cv and worker_exchange_s must all be given,"
                f" one per worker ({workers})"
            )
        return [
            (c, cv, x / 2, x / 2)
            for c, cv, x in zip(
                self.worker_compute_s, self.worker_step_cv, self.worker_exchange_s, strict=True
            )
        ]

    def expected_slowest_s(self, workers: int, runs: int = 50, steps: int = 200) -> float:
        """The mean time of the slowest of ``workers`` compute times, what a simulated
        sync step waits for before its all-reduce (Monte Carlo over ``runs`` runs' worker
        speeds and ``steps`` steps each, as :func:`simulate` draws them)."""
        rng = np.random.default_rng(0)
        total = 0.0
        for _ in range(runs):
            each = self.per_worker(workers, rng)
            times = np.stack([_lognormal(rng, c, cv, steps) for c, cv, _, _ in each])
            total += float(times.max(axis=0).mean())
        return total / runs

    def allreduce_s(self, workers: int, nbytes: int) -> float:
        """Ring all-reduce of ``nbytes`` over ``workers`` (0 for one worker)."""
        if workers <= 1:
            return 0.0
        return (
            2 * (workers - 1) * self.alpha_s
            + 2 * (workers - 1) / workers * nbytes * self.beta_s_per_byte
        )


def _lognormal(
    rng: np.random.Generator, mean: float, cv: float, size: int | None = None
) -> np.ndarray:
    if cv <= 0:
        return np.full(size or 1, mean)
    s2 = math.log1p(cv * cv)
    return rng.lognormal(math.log(mean) - s2 / 2, math.sqrt(s2), size or 1)


class MLP:
    """64 -> hidden -> 10 ReLU MLP on a flat parameter vector, torch.nn.Linear's init."""

    def __init__(self, sizes: tuple[int, int, int] = (64, 64, 10)) -> None:
        self.sizes = sizes
        i, h, o = sizes
        self.shapes = [(h, i), (h,), (o, h), (o,)]
        self.n = sum(int(np.prod(s)) for s in self.shapes)

    def init(self, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        i, h, _ = self.sizes
        parts = []
        for shape, fan_in in zip(self.shapes, (i, i, h, h), strict=True):
            bound = 1 / math.sqrt(fan_in)
            parts.append(rng.uniform(-bound, bound, shape).ravel())
        return np.concatenate(parts).astype(np.float32)

    def _unpack(self, w: np.ndarray) -> list[np.ndarray]:
        out, k = [], 0
        for s in self.shapes:
            m = int(np.prod(s))
            out.append(w[k : k + m].reshape(s))
            k += m
        return out

    def logits(self, w: np.ndarray, X: np.ndarray) -> np.ndarray:
        W1, b1, W2, b2 = self._unpack(w)
        return np.maximum(X @ W1.T + b1, 0) @ W2.T + b2

    def grad(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Gradient of the mean cross-entropy over the batch."""
        W1, b1, W2, b2 = self._unpack(w)
        h = np.maximum(X @ W1.T + b1, 0)
        z = (h @ W2.T + b2).astype(np.float64)
        z -= z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        p[np.arange(len(y)), y] -= 1
        p /= len(y)
        p = p.astype(w.dtype, copy=False)
        gW2, gb2 = p.T @ h, p.sum(0)
        dh = (p @ W2) * (h > 0)
        gW1, gb1 = dh.T @ X, dh.sum(0)
        return np.concatenate([gW1.ravel(), gb1, gW2.ravel(), gb2])

    def correct(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
        return (self.logits(w, X).argmax(1) == y).astype(np.int8)


@dataclass
class SimResult:
    """One simulated run: accuracy against simulated time and the update statistics."""

    algorithm: str
    workers: int
    times: list[float] = field(default_factory=list)  # simulated seconds at each check
    examples: list[int] = field(default_factory=list)  # examples consumed at each check
    accuracy: list[float] = field(default_factory=list)  # eval accuracy at each check
    updates: int = 0
    mean_staleness: float = 0.0
    max_staleness: int = 0
    total_s: float = 0.0
    final_correct: np.ndarray | None = None  # 0/1 per evaluation example
    diverged: bool = False

    @property
    def final_accuracy(self) -> float:
        return float(self.final_correct.mean()) if self.final_correct is not None else float("nan")

    @property
    def examples_per_s(self) -> float:
        return self.examples[-1] / self.total_s if self.total_s > 0 else float("nan")

    def time_to(self, target: float) -> float:
        """First simulated time at which the eval accuracy reached ``target`` (inf if never)."""
        for t, a in zip(self.times, self.accuracy, strict=True):
            if a >= target:
                return t
        return float("inf")


def _shards(n: int, workers: int, epochs: int, batch: int, seed: int) -> list[list[np.ndarray]]:
    """Each worker's batches: every epoch a fresh permutation, rank r takes r::N."""
    rng = np.random.default_rng(seed)
    out: list[list[np.ndarray]] = [[] for _ in range(workers)]
    for _ in range(epochs):
        perm = rng.permutation(n)
        for r in range(workers):
            mine = perm[r::workers]
            for k in range(len(mine) // batch):
                out[r].append(mine[k * batch : (k + 1) * batch])
    return out


def simulate(
    algorithm: str,
    workers: int,
    timing: Timing,
    X: np.ndarray,
    y: np.ndarray,
    X_eval: np.ndarray,
    y_eval: np.ndarray,
    *,
    lr: float,
    momentum: float = 0.9,
    batch: int = 32,
    epochs: int = 30,
    seed: int = 0,
    staleness_aware: bool = False,
    eval_every: int = 20,
    hidden: int = 64,
) -> SimResult:
    """Simulate one run of ``algorithm`` ("async" or "sync") on ``workers`` workers.

    Args:
        algorithm: "async" (parameter server) or "sync" (all-reduce every step).
        workers: N.
        timing: the cost model.
        X, y: training data; each worker takes its shard of every epoch.
        X_eval, y_eval: what the accuracy is measured on.
        lr: the server's (async) or the step's (sync) learning rate.
        momentum: momentum of the SGD update (torch.optim.SGD's form).
        batch: per-worker batch.
        epochs: passes over the training set (the examples budget is the same for all N).
        seed: model initialisation, data order and timing draws.
        staleness_aware: async only: divide the rate by max(1, staleness) (Zhang et al.
            2016, "Staleness-aware async-SGD").
        eval_every: evaluate every this many server updates (async) or
            ``max(1, eval_every // workers)`` steps (sync), so both arms are checked at
            about the same examples.
        hidden: hidden units.

    Returns:
        The run's ``SimResult``.
    """
    if algorithm not in ("async", "sync"):
        raise ValueError(f"algorithm must be 'async' or 'sync', got {algorithm!r}")
    X, X_eval = np.asarray(X, np.float32), np.asarray(X_eval, np.float32)
    model = MLP((X.shape[1], hidden, int(max(y.max(), y_eval.max())) + 1))
    if workers == 1:  # the runtime trains locally at world size 1: no server, no exchange
        timing = Timing(timing.compute_s, timing.step_cv, timing.worker_cv)
    w = model.init(seed)
    v = np.zeros_like(w)
    rng = np.random.default_rng(seed + 7919)
    each = timing.per_worker(workers, rng)  # (mean compute, step CV, push, pull) per worker
    shards = _shards(len(X), workers, epochs, batch, seed)
    res = SimResult(algorithm, workers)

    def check(t: float, seen: int) -> bool:
        acc = float(model.correct(w, X_eval, y_eval).mean())
        res.times.append(t)
        res.examples.append(seen)
        res.accuracy.append(acc)
        return bool(np.isfinite(w).all())

    def compute_time(r: int) -> float:
        return float(_lognormal(rng, each[r][0], each[r][1])[0])

    check(0.0, 0)
    if algorithm == "sync":
        steps = min(len(s) for s in shards)
        every = max(1, eval_every // workers)
        t = 0.0
        allreduce = timing.allreduce_s(workers, w.size * 4)  # float32 gradients
        for k in range(steps):
            g = np.zeros_like(w)
            slowest = 0.0
            for r in range(workers):
                idx = shards[r][k]
                g += model.grad(w, X[idx], y[idx])
                slowest = max(slowest, compute_time(r))
            g /= workers
            v = np.float32(momentum) * v + g
            w = w - np.float32(lr) * v
            t += slowest + allreduce + timing.apply_s
            res.updates += 1
            if not np.isfinite(w).all():
                res.diverged = True
                break
            if (k + 1) % every == 0:
                check(t, (k + 1) * batch * workers)
        res.total_s = t
        if not res.examples or res.examples[-1] != res.updates * batch * workers:
            check(t, res.updates * batch * workers)
        res.final_correct = model.correct(w, X_eval, y_eval)
        return res

    # async: events are (time the gradient reaches the server, order, worker, version, grad)
    version, server_free, staleness_sum = 0, 0.0, 0
    pending: list[tuple[float, int, int, int, np.ndarray]] = []
    cursor = [0] * workers
    order = 0
    for r in range(workers):
        if shards[r]:
            idx = shards[r][0]
            cursor[r] = 1
            arrive = compute_time(r) + each[r][2]
            heapq.heappush(pending, (arrive, order, r, version, model.grad(w, X[idx], y[idx])))
            order += 1
    t = 0.0
    while pending:
        arrive, _, r, seen_version, g = heapq.heappop(pending)
        start = max(arrive, server_free)
        done = start + timing.apply_s
        server_free = done
        stale = version - seen_version
        staleness_sum += stale
        res.max_staleness = max(res.max_staleness, stale)
        rate = lr / max(1, stale) if staleness_aware else lr
        v = np.float32(momentum) * v + g
        w = w - np.float32(rate) * v
        version += 1
        res.updates += 1
        t = done
        if not np.isfinite(w).all():
            res.diverged = True
            break
        if res.updates % eval_every == 0:
            check(t, res.updates * batch)
        if cursor[r] < len(shards[r]):  # the worker gets the new parameters, goes on
            idx = shards[r][cursor[r]]
            cursor[r] += 1
            back = done + each[r][3]
            arrive = back + compute_time(r) + each[r][2]
            heapq.heappush(pending, (arrive, order, r, version, model.grad(w, X[idx], y[idx])))
            order += 1
    res.total_s = t + (each[r][3] if res.updates else 0.0)  # the last pull
    res.mean_staleness = staleness_sum / max(1, res.updates)
    if res.examples[-1] != res.updates * batch:
        check(t, res.updates * batch)
    res.final_correct = model.correct(w, X_eval, y_eval)
    return res
