"""System metrics of each worker process, sampled on a background thread.

The runtime calls :func:`start_sampler` once per rank after installing the reporter,
and ``stop()`` on the returned sampler at exit. Every ``interval`` seconds the thread
writes one event to the rank's own file ``<job_dir>/metrics/system-rank-<r>.jsonl``
(one ``os.write`` with ``O_APPEND``; one file per rank, because appends from several
hosts to one file are not atomic on NFS, see :mod:`alchemist.metrics.reporter`)::

    {"kind": "system", "job_id": ..., "rank": 0, "host": "node-1", "step": 120,
     "time": 1764700000.0, "values": {"cpu_percent": 97.0, ...}}

``step`` is the last step this rank logged (null before the first). Values:

- ``cpu_percent``: this process's CPU use since the last sample (100 = one core);
- ``rss_bytes``: this process's resident memory;
- ``host_cpu_percent``, ``host_mem_percent``: the whole machine (all cores = 100);
- ``net_sent_bytes``, ``net_recv_bytes``: the machine's cumulative network counters
  (the monitor shows their rate);
- with a GPU (NVML through ``pynvml``, package ``nvidia-ml-py``): ``gpu_util_percent``,
  ``gpu_mem_used_bytes``, ``gpu_mem_total_bytes`` of this rank's device (``local_rank``
  within ``CUDA_VISIBLE_DEVICES``).

Nothing here runs on the training thread: ``log`` never waits for a sample. When the
reporter keeps events in memory (no job), the sampler keeps its events in memory too.
"""

from __future__ import annotations

import collections
import json
import os
import socket
import threading
import time
from typing import Any

from alchemist.metrics.reporter import Reporter

DEFAULT_INTERVAL = 2.0


class _Gpu:
    """NVML handle of one device, or nothing when NVML or the device is absent."""

    def __init__(self, local_rank: int) -> None:
        self.handle: Any = None
        self._nvml: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            index = local_rank
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            if visible:
                ids = [v.strip() for v in visible.split(",") if v.strip()]
                if local_rank < len(ids) and ids[local_rank].isdigit():
                    index = int(ids[local_rank])
            if index < pynvml.nvmlDeviceGetCount():
                self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                self._nvml = pynvml
        except Exception:  # no driver, no library, no device: no GPU metrics
            self.handle = None

    def sample(self) -> dict[str, float]:
        if self.handle is None:
            return {}
        nvml = self._nvml
        try:
            util = nvml.nvmlDeviceGetUtilizationRates(self.handle)
            mem = nvml.nvmlDeviceGetMemoryInfo(self.handle)
        except Exception:
            return {}
        return {
            "gpu_util_percent": float(util.gpu),
            "gpu_mem_used_bytes": float(mem.used),
            "gpu_mem_total_bytes": float(mem.total),
        }


class SystemSampler(threading.Thread):
    """The sampling thread; see the module docstring. Create with :func:`start_sampler`."""

    def __init__(self, reporter: Reporter, interval: float, local_rank: int) -> None:
        super().__init__(name="alchemist-system-metrics", daemon=True)
        import psutil

        self._psutil = psutil
        self.reporter = reporter
        self.interval = interval
        self.local_rank = local_rank
        self.host = socket.gethostname()
        self._stop_event = threading.Event()
        self._process = psutil.Process()
        self._gpu = _Gpu(local_rank)
        self._fd: int | None = None
        self.memory: collections.deque[dict[str, Any]] | None = None
        if reporter.job_dir is not None:
            reporter.job_dir.metrics_dir.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(
                reporter.job_dir.rank_metrics(reporter.rank, system=True),
                os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                0o644,
            )
        else:
            self.memory = collections.deque(maxlen=10_000)
        # The first cpu_percent call only starts the measurement window.
        self._process.cpu_percent(None)
        psutil.cpu_percent(None)

    def sample(self) -> dict[str, float]:
        """One sample of this process, the machine and the GPU (see the module docstring)."""
        ps = self._psutil
        values: dict[str, float] = {
            "cpu_percent": float(self._process.cpu_percent(None)),
            "rss_bytes": float(self._process.memory_info().rss),
            "host_cpu_percent": float(ps.cpu_percent(None)),
            "host_mem_percent": float(ps.virtual_memory().percent),
        }
        net = ps.net_io_counters()
        if net is not None:
            values["net_sent_bytes"] = float(net.bytes_sent)
            values["net_recv_bytes"] = float(net.bytes_recv)
        values.update(self._gpu.sample())
        return values

    def write_sample(self) -> dict[str, Any]:
        """Take one sample and write it as an event; return the event."""
        event = {
            "kind": "system",
            "job_id": self.reporter.job_id,
            "rank": self.reporter.rank,
            "host": self.host,
            "step": self.reporter.last_step,
            "time": time.time(),
            "values": self.sample(),
        }
        if self._fd is not None:
            os.write(self._fd, (json.dumps(event, separators=(",", ":")) + "\n").encode())
        elif self.memory is not None:
            self.memory.append(event)
        return event

    def run(self) -> None:
        # A first sample soon, so that a short job shows its load too.
        wait = min(self.interval, 1.0)
        while not self._stop_event.wait(wait):
            try:
                self.write_sample()
            except OSError:  # the job directory went away: nothing left to report to
                return
            wait = self.interval

    def stop(self, timeout: float = 5.0) -> None:
        """Stop sampling and close the file. Idempotent."""
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def start_sampler(
    reporter: Reporter, interval: float = DEFAULT_INTERVAL, local_rank: int | None = None
) -> SystemSampler:
    """Start sampling system metrics of this process for ``reporter``'s rank.

    Args:
        reporter: the rank's reporter (gives the job directory, job id, rank, last step).
        interval: seconds between samples (the first comes after at most one second).
        local_rank: this rank's index on its machine, to pick its GPU (default: env
            ``LOCAL_RANK``, else 0).

    Returns:
        The running sampler; call ``stop()`` when the rank exits.
    """
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    sampler = SystemSampler(reporter, interval, local_rank)
    sampler.start()
    return sampler
