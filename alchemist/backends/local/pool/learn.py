"""The warm pool learns what to preload: the installed packages its jobs import.

A warm rank starts with what its zygote imported (torch, numpy, Alchemist's runtime:
:data:`~alchemist.backends.local.pool.zygote.PRELOAD`); a job that imports Lightning
then pays Lightning's import (2 s here) in every rank of every job. So rank 0 of each
warm job, when its code has run, notes the top-level packages it imported that the
zygote had not and that come from an installed distribution (a ``site-packages``
folder: never the user's own modules, which an edit would leave served stale). The
daemon, once idle, starts a second zygote that preloads them too, in the background,
keeps serving from the first meanwhile, and swaps when the new one is ready and no
rank runs: no job waits for it. A package that starts threads on import (a fork would
not copy them) is marked unsafe and never preloaded again. ``alchemist pool`` says what
was learned.

Files, in the pool's folder: ``learned.jsonl`` (one line per job: the packages it
imported) and ``unsafe.json`` (packages never to preload).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

from alchemist.job.jobdir import atomic_write_json

LEARNED_FILE = "learned.jsonl"
UNSAFE_FILE = "unsafe.json"
#: Packages preloaded from what jobs imported, at most (the most often imported first).
MAX_LEARNED = 24
#: Lines of ``learned.jsonl`` read (the newest); older jobs' imports are forgotten.
WINDOW = 200
#: The variable that hands the learned packages to a new zygote (comma-separated).
LEARNED_VAR = "ALCHEMIST_POOL_LEARNED"
#: Never preloaded, whatever jobs import: ours (the zygote has what it needs).
_NEVER = frozenset({"alchemist", "__main__", "__mp_main__"})


def _installed_dirs() -> tuple[str, ...]:
    return tuple(
        os.path.realpath(p) + os.sep
        for p in sys.path
        if p and os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages")
    )


def installed_roots(names: set[str]) -> list[str]:
    """The top-level packages among module ``names`` that an installed distribution
    provides (their file in a ``site-packages`` folder)."""
    dirs = _installed_dirs()
    out = set()
    for name in {n.split(".", 1)[0] for n in names}:
        if name in _NEVER or name.startswith("_"):
            continue
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None) or ""
        if path and os.path.realpath(path).startswith(dirs):
            out.add(name)
    return sorted(out)


def record(folder: Path, baseline: set[str]) -> None:
    """Rank side: note the installed packages this process imported beyond ``baseline``
    (the zygote's modules). A failure here never touches the job."""
    with contextlib.suppress(Exception):
        had = {n.split(".", 1)[0] for n in baseline}
        new = [m for m in installed_roots(set(sys.modules) - baseline) if m not in had]
        if new:
            line = json.dumps({"modules": new, "time": time.time()}) + "\n"
            fd = os.open(folder / LEARNED_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode())  # one short append: lines never interleave
            finally:
                os.close(fd)


def unsafe(folder: Path) -> set[str]:
    try:
        return set(json.loads((folder / UNSAFE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return set()


def mark_unsafe(folder: Path, names: list[str]) -> None:
    atomic_write_json(folder / UNSAFE_FILE, sorted(unsafe(folder) | set(names)))


def learned(folder: Path) -> list[str]:
    """What to preload: the packages recent jobs imported, most often first, unsafe ones
    left out, at most :data:`MAX_LEARNED`."""
    try:
        lines = (folder / LEARNED_FILE).read_text().splitlines()[-WINDOW:]
    except OSError:
        return []
    counts: Counter[str] = Counter()
    for line in lines:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            counts.update(str(m) for m in json.loads(line).get("modules", []))
    bad = unsafe(folder)
    ranked = [m for m, _ in counts.most_common() if m not in bad and m.isidentifier()]
    return sorted(ranked[:MAX_LEARNED])
