"""Reading faulthandler's stack dumps, and what a rank's main thread is doing.

A dump is one block per thread, most recent call first::

    Thread 0x00007f3a... (most recent call first):
      File "/.../torch/distributed/distributed_c10d.py", line 2806 in all_reduce
      File "<cell>", line 7 in <module>

From the main thread's frames come the rank's innermost *user* frame (the cell, the
script, the user's own modules: not the standard library, installed packages or
Alchemist), the collective it waits in, if any (``torch.distributed``'s, or Horovod's as
``hvd.allreduce``), and whether that wait is Alchemist's own (the checkpoint barrier,
BMUF's block average), which is labelled, not called a hang; or its wait on the
parameter server of ``async`` and ``easgd`` (a TCP request, not a collective).
"""

from __future__ import annotations

import re
import sys
import sysconfig
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

_THREAD = re.compile(
    r"^(?:(Current thread|Thread) (0x[0-9a-fA-F]+)|Stack) \(most recent call first\):\s*$"
)
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.*?)\s*$')
#: The header the watchdog (``dump_traceback_later``) writes before each dump.
TIMEOUT_HEADER = "Timeout ("

#: ``torch.distributed`` functions that wait for the other ranks.
COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_reduce_coalesced",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "all_gather_coalesced",
        "all_to_all",
        "all_to_all_single",
        "barrier",
        "monitored_barrier",
        "broadcast",
        "broadcast_object_list",
        "gather",
        "gather_object",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "scatter",
        "scatter_object_list",
        "send",
        "recv",
        "isend",
        "irecv",
        "batch_isend_irecv",
    }
)
#: ``torch.distributed`` functions that wait for the ranks to join.
RENDEZVOUS = frozenset({"init_process_group", "rendezvous", "_store_based_barrier", "new_group"})
#: Alchemist's own waits: (module file name, function) → label.
ALCHEMIST_WAITS = {
    ("helpers.py", "save_checkpoint"): "the checkpoint barrier",
    ("helpers.py", "restore"): "restore's broadcast of the checkpoint to load",
    ("bmuf.py", "block_update"): "BMUF's block average",
    ("bmuf.py", "finish"): "BMUF's last block average",
}
#: Alchemist's waits on the parameter server of ``async`` and ``easgd``
#: (``alchemist/runtime/algorithms/_ps.py``): a TCP request to rank 0's server threads,
#: not a ``torch.distributed`` collective. (function → label)
SERVER_WAITS = {
    "request": "a request to the parameter server",
    "wait_finished": "the parameter server's wait for every worker to finish",
}
#: Horovod's waits (``horovod/torch/``): the outermost of these functions names the
#: collective (``hvd.allreduce``); DistributedOptimizer's ``step`` and ``synchronize``
#: wait for its gradient all-reduces.
HOROVOD_OPS = frozenset(
    {
        "allreduce",
        "allreduce_",
        "grouped_allreduce",
        "grouped_allreduce_",
        "allgather",
        "grouped_allgather",
        "broadcast",
        "broadcast_",
        "broadcast_object",
        "broadcast_parameters",
        "broadcast_optimizer_state",
        "allgather_object",
        "alltoall",
        "reducescatter",
        "grouped_reducescatter",
        "barrier",
        "join",
        "synchronize",
    }
)


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def short(self) -> str:
        where = self.file if self.file.startswith("<") else Path(self.file).name
        if self.function == "<module>":
            return f"{where}:{self.line}"
        return f"{self.function} ({where}:{self.line})"


@dataclass(frozen=True)
class Thread:
    #: the thread's id; None in a dump of the current thread alone ("Stack ...:")
    id: int | None
    current: bool
    #: most recent call first
    frames: tuple[Frame, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": None if self.id is None else f"0x{self.id:016x}",
            "current": self.current,
            "frames": [f.to_dict() for f in self.frames],
        }


def last_dump(text: str) -> str:
    """The last watchdog dump in ``text`` (all of it when it has no watchdog header)."""
    start = text.rfind(TIMEOUT_HEADER)
    return text[start:] if start >= 0 else text


def parse_dump(text: str) -> list[Thread]:
    """The threads of the last faulthandler dump in ``text`` (a thread seen again starts
    a new dump: two requests at once append two)."""
    threads: list[Thread] = []
    current: tuple[int | None, bool] | None = None
    frames: list[Frame] = []
    for line in text.splitlines():
        m = _THREAD.match(line)
        if m:
            if current is not None:
                threads.append(Thread(current[0], current[1], tuple(frames)))
            if m.group(2) is None:  # "Stack": the current thread alone
                current = (None, True)
            else:
                current = (int(m.group(2), 16), m.group(1) == "Current thread")
            if any(t.id == current[0] for t in threads):
                threads = []
            frames = []
            continue
        f = _FRAME.match(line)
        if f and current is not None:
            frames.append(Frame(f.group(1), int(f.group(2)), f.group(3)))
    if current is not None:
        threads.append(Thread(current[0], current[1], tuple(frames)))
    return threads


def main_thread(threads: list[Thread], main_id: int | None) -> Thread | None:
    """The rank's main thread: by its id when known; the only one of a dump of one
    thread (the signal interrupts the main thread); else the one whose outermost frame
    is a program's start (``python -m``, a script's top level); else the first."""
    if main_id is not None:
        for t in threads:
            if t.id == main_id:
                return t
    if len(threads) == 1:
        return threads[0]
    for t in threads:
        if t.frames and t.frames[-1].function in ("_run_module_as_main", "<module>"):
            return t
    return threads[0] if threads else None


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    roots = {str(Path(__file__).resolve().parent.parent)}  # the alchemist package
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(str(Path(path).resolve()))
    roots.update(str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix) if p)
    return tuple(sorted(roots))


def is_user_file(file: str) -> bool:
    """True for the user's code: a cell or script (``<cell>``, ``<script>``, an IPython
    input) or a file outside Python's own, the installed packages' and Alchemist's."""
    if file.startswith("<"):
        return not file.startswith("<frozen")
    if "/site-packages/" in file or "/dist-packages/" in file:
        return False
    return not any(file == r or file.startswith(r + "/") for r in _library_roots())


@dataclass(frozen=True)
class Activity:
    """What one main thread is doing."""

    #: the innermost frame of the user's code, or None
    user_frame: Frame | None
    #: the ``torch.distributed`` collective it waits in, or None
    collective: str | None
    #: ``"rendezvous"`` when it waits for the ranks to join the process group
    rendezvous: bool
    #: the label of Alchemist's own wait it is in (``"the checkpoint barrier"``), or None
    alchemist_wait: str | None
    #: the innermost frame of all (the user's, a library's, Alchemist's), or None
    top: Frame | None = None
    #: the label of its wait on the parameter server (``async``, ``easgd``: not a
    #: collective), or None
    server_wait: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "user_frame": self.user_frame.to_dict() if self.user_frame else None,
            "top_frame": self.top.to_dict() if self.top else None,
            "collective": self.collective,
            "rendezvous": self.rendezvous,
            "alchemist_wait": self.alchemist_wait,
            "server_wait": self.server_wait,
        }


def _in_torch_distributed(file: str) -> bool:
    return "torch/distributed/" in file.replace("\\", "/")


def _horovod_op(frame: Frame) -> str | None:
    """``hvd.allreduce`` for a frame of Horovod's that waits for the other ranks."""
    path = frame.file.replace("\\", "/")
    if "/horovod/" not in path or frame.function not in HOROVOD_OPS | {"step"}:
        return None
    if path.endswith("/optimizer.py") and frame.function in ("step", "synchronize"):
        return "hvd.allreduce"  # DistributedOptimizer waits for the gradients' all-reduce
    return None if frame.function == "step" else f"hvd.{frame.function}"


def activity(thread: Thread) -> Activity:
    """What ``thread`` does: its user frame, and the collective or rendezvous it is in
    (a ``torch.distributed`` one, Horovod's, or a wait on Alchemist's parameter server)."""
    user = next((f for f in thread.frames if is_user_file(f.file)), None)
    collective = None
    rendezvous = False
    server = None
    for f in thread.frames:  # most recent first: the last match is the outermost call
        if is_user_file(f.file):
            break
        if _in_torch_distributed(f.file):
            if f.function in COLLECTIVES:
                collective = f.function
            elif f.function in RENDEZVOUS:
                rendezvous = True
        elif (op := _horovod_op(f)) is not None:
            collective = op
        elif Path(f.file).name == "_ps.py" and "/alchemist/" in f.file.replace("\\", "/"):
            server = SERVER_WAITS.get(f.function, server)
    wait = None
    if collective is not None:
        for f in thread.frames:
            if is_user_file(f.file):
                break
            label = ALCHEMIST_WAITS.get((Path(f.file).name, f.function))
            if label and "/alchemist/" in f.file.replace("\\", "/"):
                wait = label
    top = thread.frames[0] if thread.frames else None
    if collective is not None:
        server = None  # the server's start-up broadcast: a collective
    return Activity(user, collective, rendezvous and collective is None, wait, top, server)


def summary(thread: Thread) -> str:
    """One line for a stack: ``all_reduce ← <cell>:7`` (the wait, then the user frame)."""
    act = activity(thread)
    parts = []
    if act.collective:
        parts.append(act.collective + (f" ({act.alchemist_wait})" if act.alchemist_wait else ""))
    elif act.rendezvous:
        parts.append("init_process_group (waiting for the ranks to join)")
    elif act.server_wait:
        parts.append(act.server_wait)
    elif thread.frames and thread.frames[0] is not act.user_frame:
        parts.append(thread.frames[0].short())
    if act.user_frame:
        parts.append(act.user_frame.short())
    return " ← ".join(parts) or "(no Python frame)"
