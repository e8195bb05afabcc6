"""Run a job as local processes: a supervisor, torchrun, one process per rank.

The supervisor starts in a new session (``start_new_session=True``), so the job is in
a process group of its own and survives the kernel being interrupted, restarted or
killed. Processes are started with fork+exec (``subprocess``), never a bare fork, so
CUDA is initialised only in the fresh worker processes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from alchemist.backends.api import Backend, DryRunInfo, JobRequest, format_command
from alchemist.backends.launch import LOOPBACK, local_launcher_args, runtime_args, worker_env
from alchemist.backends.local import admission
from alchemist.backends.local.admission import Capacity
from alchemist.backends.local.procs import (
    alive,
    job_processes,
    live_pid,
    start_supervisor,
    terminate,
)
from alchemist.errors import CapacityError, JobNotFoundError
from alchemist.job import outcomes
from alchemist.job.algorithms import needs_own_launcher
from alchemist.job.jobdir import atomic_write_json
from alchemist.job.spec import RANK_ENTRIES, SESSION_ENTRY, JobSpec, JobState, JobStatus

#: How long a submitted job may have no state before we call its launcher lost.
_START_GRACE_S = 30.0


#: CPU slots jobs of this machine may use together (default: its cores).
SLOTS_VAR = "ALCHEMIST_LOCAL_CPU_SLOTS"
#: The machine's GPU count as the queue sees it (default: what CUDA finds). A test
#: hook too: a fake inventory lets tests on a machine without GPUs check that
#: concurrent jobs get disjoint CUDA_VISIBLE_DEVICES.
GPUS_VAR = "ALCHEMIST_LOCAL_GPUS"


def _env_count(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise CapacityError(f"{name} must be a whole number, got {raw!r}") from None
    if value < 0:
        raise CapacityError(f"{name} must be 0 or more, got {value}")
    return value


def _cpu_slots() -> int:
    slots = _env_count(SLOTS_VAR)
    return slots if slots is not None else os.cpu_count() or 1


def _cores() -> int:
    """The cores this process may run on (its affinity: a cpuset, ``taskset``)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _loopback_interface() -> str | None:
    """The name of the network interface that carries 127.0.0.1 (``lo`` on Linux)."""
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == LOOPBACK for a in addrs):
            return name
    return None


#: One folder per NVIDIA GPU the driver sees (also in containers given GPUs).
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


def _gpu_inventory() -> int:
    """The GPUs jobs may use, as ``torch.cuda.device_count()`` would say, without
    importing torch where it is not loaded yet (about a second: most of a warm job's
    time to first step from a terminal): the NVIDIA driver's list, narrowed by
    ``CUDA_VISIBLE_DEVICES`` as CUDA narrows it (up to the first invalid index)."""
    fake = _env_count(GPUS_VAR)
    if fake is not None:
        return fake
    if "torch" in sys.modules or (not NVIDIA_GPUS.is_dir() and _other_gpu_devices()):
        try:
            import torch

            return int(torch.cuda.device_count())
        except Exception:  # pragma: no cover - torch is a dependency
            return 0
    try:
        found = sum(1 for _ in NVIDIA_GPUS.iterdir())
    except OSError:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return found
    usable = 0
    for entry in visible.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break  # CUDA ignores what follows an invalid index
        usable += 1
    return min(usable, found)


def _other_gpu_devices() -> bool:
    """A GPU that is not NVIDIA's, or one whose driver keeps no list in /proc (ROCm's
    /dev/kfd, /dev/nvidia0 without /proc/driver/nvidia): ask torch."""
    return Path("/dev/kfd").exists() or Path("/dev/nvidia0").exists()


class LocalBackend(Backend):
    """Jobs as detached process groups on this machine. Rank logs go to the job directory."""

    name = "local"
    runs_sessions = True

    def __init__(self) -> None:
        # Supervisors we started, so that finished ones are reaped (no zombies).
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def _command(self, req: JobRequest) -> list[str]:
        spec = req.spec
        if spec.entry == SESSION_ENTRY:
            # What each engine runs when it starts cold; the supervisor starts them beside
            # the session's controller (alchemist.backends.local.session).
            entry = RANK_ENTRIES[SESSION_ENTRY]
            return [sys.executable, "-m", entry.module, *entry.argv(str(req.job_dir.root), "RANK")]
        if needs_own_launcher(spec.algorithm):
            from alchemist.backends.horovod_launch import horovod_argv

            return horovod_argv(spec, req.job_dir)
        nproc = spec.world_size  # every worker of a local job runs on this one node
        return [sys.executable, *local_launcher_args(spec, nproc), *runtime_args(req.job_dir)]

    def capacity(self) -> Capacity:
        """What this machine offers jobs: CPU slots (one per rank) and GPUs."""
        return Capacity(slots=_cpu_slots(), gpus=_gpu_inventory())

    def concurrent_limit(self, spec: JobSpec) -> int | None:
        """Jobs of ``spec`` this machine's queue admits at once: its CPU slots (and
        GPUs) over what one job takes."""
        capacity = self.capacity()
        fits = capacity.slots // max(1, spec.world_size)
        gpus = spec.workers * spec.resources.gpus
        if gpus:
            fits = min(fits, capacity.gpus // gpus)
        return fits

    def _check_resources(self, spec: JobSpec, capacity: Capacity) -> None:
        """Refuse a job that could never fit on this machine, in one line."""
        gpus = spec.workers * spec.resources.gpus
        if gpus > capacity.gpus:
            raise CapacityError(
                f"the job asks for {gpus} GPUs ({spec.workers} workers x"
                f" {spec.resources.gpus}) but this machine has {capacity.gpus}: lower"
                " --gpus-per-worker or -n, or use --backend kubernetes"
            )
        if spec.world_size > capacity.slots:
            raise CapacityError(
                f"the job runs {spec.world_size} ranks but this machine has"
                f" {capacity.slots} CPU slots (one per rank; its cores, or"
                f" {SLOTS_VAR}): lower -n, or use --backend kubernetes"
            )

    def admission(self, spec: JobSpec, owner: str) -> dict[str, Any]:
        """What a job (or a session) asks of the machine's queue: its CPU slots and GPUs
        against the capacity, for :func:`~alchemist.backends.local.supervisor.wait_for_admission`.

        Raises:
            CapacityError: it could never fit on this machine, or the machine's queue
                cannot be used (one line each).
        """
        capacity = self.capacity()
        self._check_resources(spec, capacity)
        try:
            admission.queue_dir()
        except OSError as e:
            raise CapacityError(str(e)) from None
        return {
            "owner": owner,
            "created": time.time(),
            "slots": spec.world_size,
            "gpus": spec.workers * spec.resources.gpus,
            "capacity": {"slots": capacity.slots, "gpus": capacity.gpus},
        }

    def _dryrun(self, req: JobRequest) -> DryRunInfo:
        adm = self.admission(req.spec, req.owner)
        argv = self._command(req)
        env = worker_env(req.job_id, req.job_dir, req.spec, _cores() / req.spec.workers)
        loopback = _loopback_interface()
        if loopback is not None:
            # gloo's listening sockets (one per peer, in every rank) bind the address
            # the hostname resolves to unless told an interface: keep them on loopback
            # too, as the rendezvous store is. The user's --env wins.
            env.setdefault("GLOO_SOCKET_IFNAME", loopback)
        request = {
            "entry": req.spec.entry,
            "argv": argv,
            "env": env,
            "cwd": str(req.job_dir.root),
            "timeout": req.spec.timeout,
            "world_size": req.spec.world_size,
            "max_restarts": req.spec.max_restarts,
            # Fork the ranks from the user's warm pool where it matches this environment
            # (the supervisor decides at start: alchemist.backends.local.warm).
            "warm": not req.spec.no_warm and not needs_own_launcher(req.spec.algorithm),
            "admission": adm,
        }
        cap = adm["capacity"]
        text = (
            (
                f"# an interactive session: the ipyparallel controller and {req.spec.world_size}"
                " engines, each started as\n"
                if req.spec.entry == SESSION_ENTRY
                else ""
            )
            + format_command(argv, env)
            + f"\n# admission: {adm['slots']} of {cap['slots']} CPU slots,"
            + f" {adm['gpus']} of {cap['gpus']} GPUs"
            + " (it waits, queued, until they are free)"
        )
        if request["warm"]:
            text += (
                "\n# warm start: the ranks fork from your warm pool when it matches this"
                " environment, else the command above runs (--no-warm: always the command)"
            )
        spec = req.spec
        ignored = [
            flag
            for flag, value in (
                ("--image", spec.image),
                ("--cpu", spec.resources.cpu),
                ("--memory", spec.resources.memory),
            )
            if value
        ]
        warnings = (
            [
                f"the local backend ignores {', '.join(ignored)} (they size Kubernetes pods):"
                " its jobs run in this environment, on this machine's cores and memory"
            ]
            if ignored
            else []
        )
        shipped = [
            flag for flag, v in (("--include", spec.include), ("--exclude", spec.exclude)) if v
        ]
        if shipped:
            warnings.append(
                f"the local backend ignores {' and '.join(shipped)} (they choose the files"
                " shipped to Kubernetes pods): its jobs run in the notebook's folder itself"
            )
        text += "".join(f"\n# warning: {w}" for w in warnings)
        return DryRunInfo(backend=self.name, request=request, text=text, warnings=warnings)

    def _schedule(self, req: JobRequest, info: DryRunInfo) -> None:
        jd = req.job_dir
        atomic_write_json(jd.launch, info.request)
        self._reap()
        self._children[req.job_id] = start_supervisor(
            "alchemist.backends.local.supervisor", jd.root, jd.launcher_log
        )

    def _reap(self) -> None:
        """Reap every supervisor of ours that has ended, not only the one asked about.

        A supervisor writes its job's final state and then exits: whoever watched the
        job to its end (the panel, a monitor) asks no more, so reaping only on a status
        call for that job left one zombie per job in a long-lived Jupyter server (the
        scale benchmark's soak found 512 after 1,000 jobs). Each call reaps them all.
        """
        for job_id, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[job_id]

    def status(self, req: JobRequest) -> JobStatus:
        jd = req.job_dir
        if not jd.root.is_dir():
            raise JobNotFoundError(f"job {req.job_id} has no job directory at {jd.root}")
        self._reap()
        st = jd.read_state() or {}
        restarts = _read_int(jd.restarts)
        state = JobState(st["state"]) if "state" in st else JobState.PENDING
        if not state.is_terminal and live_pid(jd.launcher_pid) is None:
            # Re-read: the launcher may have finished between the two reads.
            st = jd.read_state() or {}
            state = JobState(st["state"]) if "state" in st else JobState.PENDING
            created = jd.spec.stat().st_mtime if jd.spec.exists() else time.time()
            if not state.is_terminal and (
                jd.launcher_pid.exists() or time.time() - created > _START_GRACE_S
            ):
                st, state = self._adopt(req, st, state)
        return JobStatus(
            state=state,
            reason=st.get("reason"),
            exit_code=st.get("exit_code"),
            restarts=restarts,
            started=st.get("started"),
            finished=st.get("finished"),
            ranks=outcomes.ranks_detail(jd),
        )

    def _adopt(
        self, req: JobRequest, st: dict[str, Any], state: JobState
    ) -> tuple[dict[str, Any], JobState]:
        """The supervisor is gone: the job's state is what its ranks did.

        Ranks that still run (torchrun lives on when only the supervisor was killed) keep
        the job running, watched here until they end; then the ranks' records decide:
        work that finished is a success, never "the launcher is gone".
        """
        jd = req.job_dir
        torchrun = live_pid(jd.torchrun_pid)
        if state == JobState.RUNNING and job_processes(jd.root, [torchrun] if torchrun else []):
            return st, state
        world = req.spec.world_size
        if state == JobState.RUNNING and outcomes.work_finished(jd, world):
            jd.write_state(state="succeeded", reason=None, finished=time.time())
        else:
            why = outcomes.died_first(jd, world) if state == JobState.RUNNING else None
            jd.write_state(
                state="failed",
                reason=(why + "; " if why else "")
                + "the job's launcher process is gone (killed, or the machine restarted);"
                " its files are kept in the job directory",
                finished=time.time(),
            )
        st = jd.read_state() or {}
        return st, JobState(st["state"])

    def cancel(self, req: JobRequest) -> None:
        jd = req.job_dir
        if not jd.root.is_dir():
            raise JobNotFoundError(f"job {req.job_id} has no job directory at {jd.root}")
        if self.status(req).state.is_terminal:
            return
        if not jd.cancel_marker.exists():
            jd.request_cancel()
        launcher = live_pid(jd.launcher_pid)
        deadline = time.time() + 15
        # The supervisor sees the marker within 0.2 s, stops the workers and records the
        # cancel; if it cannot (killed, hung), we stop everything ourselves.
        while time.time() < deadline and alive(launcher):
            self._reap()
            time.sleep(0.05)
        roots = [p for p in (launcher, live_pid(jd.torchrun_pid)) if p]
        left = job_processes(jd.root, roots)
        if left:
            terminate(left, grace=2.0)
        self._reap()
        st = jd.read_state() or {}
        if not JobState(st.get("state", "pending")).is_terminal:
            jd.write_state(state="cancelled", reason=jd.cancel_reason(), finished=time.time())


def _read_int(path: os.PathLike[str]) -> int:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0
