"""The GPU check: what only a machine with a CUDA GPU can show, one line per check.

    bash scripts/gpu-check.sh            # on a GPU machine; at most 5 minutes
    bash scripts/gpu-check.sh --cpu      # the same plumbing on the CPU (gloo), for CI

Checks (docs/gpu-check.md says what each one shows and what to do when it fails):

- nccl: a 1-rank job with ``--gpus-per-worker 1`` runs an all-reduce on the GPU, and
  its process group's backend is NCCL.
- metrics: that job's system metrics (NVML) carry GPU utilisation above 0 and device
  memory in use, as the monitor shows them.
- warm-pool: the next GPU job is served by the warm pool (its ranks forked), and the
  device memory in use is back at its baseline once it ends.
- zygote: a zygote whose process has initialised CUDA refuses to fork ranks (a CUDA
  context does not survive fork), with its one-line reason.
- throughput: steps/s of a real model (a Transformer encoder, bf16) in a 1-rank job
  against the same loop in a plain process; the ratio Alchemist / raw, target >= 0.98.
- queue: two 1-GPU jobs submitted at once on one GPU: the second waits in the queue
  until the first ends, and each job's CUDA_VISIBLE_DEVICES is the device it was given.

``--cpu`` runs the jobs on the CPU with gloo (the checks that need a GPU say
``skipped``), so that the script itself is tested where no GPU is.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: The model of the throughput check; {device} and {steps} filled in. It prints one line
#: ``steps_per_s=<float>`` over the steps after the first ten (compile and warm-up).
MODEL = """
import os, time, torch
device = {device!r}
steps = {steps}
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer({width}, 8, 4 * {width}, batch_first=True)
model = torch.nn.TransformerEncoder(layer, {layers}).to(device)
{wrap}
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn({batch}, {seq}, {width}, device=device)
def sync():
    if device == "cuda":
        torch.cuda.synchronize()
for step in range(10 + steps):
    if step == 10:
        sync()
        start = time.perf_counter()
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(x).float().pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
sync()
print(f"steps_per_s={{steps / (time.perf_counter() - start)}}", flush=True)
"""


class Check:
    """Prints one line per check; counts the failures."""

    def __init__(self) -> None:
        self.failed = 0

    def run(self, name: str, fn: Callable[[], str]) -> None:
        start = time.monotonic()
        try:
            line = f"ok      {fn()}"
        except Skip as e:
            line = f"skipped {e}"
        except Exception as e:
            self.failed += 1
            line = f"FAIL    {type(e).__name__}: {e}".splitlines()[0][:300]
        print(f"gpu-check: {name:<11} {line} ({time.monotonic() - start:.1f} s)", flush=True)


class Skip(Exception):
    pass


def submit(cell: str, **options: Any) -> Any:
    from alchemist import client

    return client.submit(textwrap.dedent(cell), namespace={}, **options)


def finish(job: Any, timeout: float = 120) -> Any:
    from alchemist.job.spec import JobState

    status = job.wait(timeout=timeout)
    if status.state is not JobState.SUCCEEDED:
        tail = job.logs(0)[-600:] if job.ranks() else ""
        raise RuntimeError(f"job {job.id} {status.state.value}: {status.reason} {tail}")
    return job.outputs() if job.spec.outputs else {}


def device_memory_used() -> int:
    import pynvml

    pynvml.nvmlInit()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"
    handle = pynvml.nvmlDeviceGetHandleByIndex(int(visible))
    return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="gloo on the CPU; GPU checks skip")
    parser.add_argument("--steps", type=int, default=200, help="throughput steps per run")
    parser.add_argument("--repeats", type=int, default=3, help="throughput runs per arm")
    args = parser.parse_args(argv)
    cpu = args.cpu
    gpus = {} if cpu else {"gpus_per_worker": 1}
    device = "cpu" if cpu else "cuda"
    check = Check()
    found: dict[str, Any] = {}

    def nccl() -> str:
        job = submit(
            f"""
            import os, time, torch, torch.distributed as dist
            device = {device!r}
            t = torch.ones(1, device=device)
            dist.all_reduce(t)
            backend = dist.get_backend()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
            x = torch.randn(4096, 4096, device=device)
            end = time.time() + 6  # long enough for the system sampler to see the load
            while time.time() < end:
                x = (x @ x).tanh()
            total = float(t.item())
            """,
            workers=1,
            outputs=["backend", "visible", "name", "total"],
            **gpus,
        )
        out = finish(job)
        found["first"] = job
        want = "gloo" if cpu else "nccl"
        if out["backend"] != want or out["total"] != 1.0:
            raise RuntimeError(f"backend {out['backend']}, all-reduce gave {out['total']}")
        return f"1 rank, backend {out['backend']}, {out['name']}"

    def metrics() -> str:
        if cpu:
            raise Skip("(--cpu: no NVML)")
        job = found.get("first")
        if job is None:
            raise RuntimeError("the nccl job did not run")
        path = job.job_dir.rank_metrics(0, system=True)
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        util = [e["gpu_util_percent"] for e in events if "gpu_util_percent" in e]
        mem = [e["gpu_mem_used_bytes"] for e in events if "gpu_mem_used_bytes" in e]
        if not util or max(util) <= 0 or not mem or max(mem) <= 0:
            raise RuntimeError(f"{len(events)} system events, util {util[:5]}, memory {mem[:5]}")
        return (
            f"{len(util)} samples, utilisation up to {max(util):.0f} %, {max(mem) / 2**30:.1f} GiB"
        )

    def warm_pool() -> str:
        baseline = None if cpu else device_memory_used()
        job = submit(
            f"""
            import torch
            x = torch.randn(8192, 8192, device={device!r})
            y = float((x @ x).sum())
            """,
            workers=1,
            outputs=["y"],
            **gpus,
        )
        finish(job)
        log = job.job_dir.launcher_log.read_text()
        if "[alchemist] warm start:" not in log:
            raise RuntimeError("the job started cold: " + log[-300:])
        if baseline is None:
            return "served warm (--cpu: no device memory)"
        deadline = time.monotonic() + 20
        used = device_memory_used()
        while used > baseline + 64 * 2**20 and time.monotonic() < deadline:
            time.sleep(0.5)
            used = device_memory_used()
        if used > baseline + 64 * 2**20:
            raise RuntimeError(
                f"device memory {used / 2**20:.0f} MiB, baseline {baseline / 2**20:.0f} MiB"
            )
        return f"served warm; device memory back to {used / 2**20:.0f} MiB (baseline {baseline / 2**20:.0f})"

    def zygote() -> str:
        from alchemist.backends.local.pool.protocol import Lines, encode

        init = (
            "torch.zeros(1, device='cuda')"
            if not cpu
            else "torch.cuda.is_initialized = lambda: True"
        )
        code = f"import sys, torch\n{init}\nfrom alchemist.backends.local.pool import zygote\nsys.exit(zygote.main())\n"
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.Popen(
                [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            assert proc.stdin is not None and proc.stdout is not None
            lines = Lines(proc.stdout.fileno())
            msgs: list[dict[str, Any]] = []
            deadline = time.monotonic() + 60
            try:
                while not any("ready" in m or "error" in m for m in msgs):
                    if time.monotonic() > deadline or lines.eof:
                        raise RuntimeError(f"the zygote did not start: {msgs}")
                    msgs += lines.wait(1.0)
                request = {"op": "fork", "tag": "t", "job_root": tmp, "cwd": tmp,
                           "log": str(Path(tmp) / "log"), "ranks": [{}]}  # fmt: skip
                proc.stdin.write(encode(request))
                proc.stdin.flush()
                while not any("error" in m for m in msgs):
                    if time.monotonic() > deadline or lines.eof:
                        break
                    msgs += lines.wait(1.0)
            finally:
                proc.kill()
                proc.wait()
        errors = [m["error"] for m in msgs if "error" in m]
        if any("forked" in m for m in msgs) or errors != ["CUDA was initialised in the zygote"]:
            raise RuntimeError(f"the zygote answered {msgs}")
        return f"refused: {errors[0]}" + (" (--cpu: CUDA faked)" if cpu else "")

    def throughput() -> str:
        size = (
            dict(width=256, layers=2, batch=8, seq=64)
            if cpu
            else dict(width=1024, layers=8, batch=32, seq=256)
        )
        steps = min(args.steps, 20) if cpu else args.steps
        raw_code = MODEL.format(device=device, steps=steps, wrap="", **size)
        cell = MODEL.format(
            device=device, steps=steps, wrap="model, _ = alchemist.distribute(model, None)", **size
        )
        cell = "import alchemist\n" + cell
        raw, ours = [], []
        for _ in range(args.repeats):  # alternating, so machine load hits both alike
            out = subprocess.run(
                [sys.executable, "-c", raw_code], capture_output=True, text=True, timeout=240
            )
            if out.returncode != 0:
                raise RuntimeError("the raw loop failed: " + out.stderr[-300:])
            raw.append(float(out.stdout.rsplit("steps_per_s=", 1)[1]))
            job = submit(cell, workers=1, **gpus)
            finish(job, timeout=240)
            ours.append(float(job.logs(0).rsplit("steps_per_s=", 1)[1].split()[0]))
        ratio = statistics.median(ours) / statistics.median(raw)
        if not cpu and ratio < 0.98:
            raise RuntimeError(f"ratio {ratio:.3f} < 0.98 (raw {raw}, alchemist {ours})")
        return (
            f"ratio {ratio:.3f} (target >= 0.98): alchemist {statistics.median(ours):.2f} steps/s,"
            f" raw {statistics.median(raw):.2f} steps/s, median of {args.repeats}"
        )

    def queue() -> str:
        cell = f"""
            import os, time, torch
            x = torch.ones(1, device={device!r})
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            started = time.time()
            time.sleep(4)
            ended = time.time()
            """
        a = submit(cell, workers=1, outputs=["visible", "started", "ended"], **gpus)
        b = submit(cell, workers=1, outputs=["visible", "started", "ended"], **gpus)
        first, second = finish(a), finish(b)
        if cpu:
            return "two jobs ran (--cpu: no devices to give)"
        if first["visible"] is None or second["visible"] is None:
            raise RuntimeError(f"CUDA_VISIBLE_DEVICES {first['visible']!r}, {second['visible']!r}")
        if second["started"] < first["ended"]:
            raise RuntimeError("the second job ran beside the first on the one GPU")
        return (
            f"CUDA_VISIBLE_DEVICES={first['visible']} then {second['visible']};"
            f" the second waited {second['started'] - first['started']:.1f} s"
        )

    for name, fn in [
        ("nccl", nccl),
        ("metrics", metrics),
        ("warm-pool", warm_pool),
        ("zygote", zygote),
        ("throughput", throughput),
        ("queue", queue),
    ]:
        check.run(name, fn)
    print(f"gpu-check: {check.failed} failed", flush=True)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
