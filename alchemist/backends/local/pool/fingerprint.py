"""Whether a warm pool may serve a job: the environment its zygote imported in.

A fork inherits every module the zygote imported, so a pool serves a job only when a
fresh interpreter would import the same code with the same settings: the same
interpreter, the same folders on ``sys.path`` unchanged since (installing or removing
a package changes its folder), and the same variables that libraries read when they
are imported (thread counts, ``PYTHONPATH``, ``LD_PRELOAD``...). The parts are kept
next to their hash, so that a mismatch can say what changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping

#: Variables read when modules are imported (or by the zygote's own start-up): a
#: change of one in the notebook's environment rebuilds the pool; a job that sets one
#: with ``--env`` runs cold.
IMPORT_TIME_PREFIXES = ("OMP_", "MKL_", "OPENBLAS_", "KMP_", "TORCH_", "PYTORCH_", "LD_")
IMPORT_TIME_VARS = frozenset(
    {
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "PYTHONHOME",
        "PYTHONNOUSERSITE",
        "PYTHONWARNINGS",
        "PYTHONSAFEPATH",
        "PYTHONDONTWRITEBYTECODE",
        "VIRTUAL_ENV",
    }
)
#: Set by Alchemist for every rank (alchemist.backends.launch.worker_env), the same warm
#: or cold: not the user's setting; and variables of those prefixes that are read when
#: called, not when imported: ``PYTORCH_NVML_BASED_CUDA_CHECK`` (read by each
#: ``torch.cuda.is_available()``; Lightning sets it when the kernel imports it, and every
#: switch between the notebook and a terminal rebuilt the pool).
_OURS = frozenset({"OMP_NUM_THREADS", "PYTORCH_NVML_BASED_CUDA_CHECK"})


def import_time_vars(env: Mapping[str, str]) -> list[str]:
    """The names in ``env`` that modules read when they are imported."""
    return sorted(
        k
        for k in env
        if (k in IMPORT_TIME_VARS or k.startswith(IMPORT_TIME_PREFIXES)) and k not in _OURS
    )


def parts(env: Mapping[str, str]) -> dict[str, str]:
    """What the fingerprint hashes, by name: the interpreter, the distributions installed
    in each ``sys.path`` folder, and the import-time variables of ``env``."""
    out = {
        "interpreter": f"{sys.executable} {sys.prefix} {sys.version.split()[0]}",
    }
    # sys.path[0] is the folder the command started in, a ranks' own (the job's).
    for entry in sys.path[1:]:
        installed = _installed(entry)
        if installed is not None:
            out[f"path {entry}"] = installed
    for name in import_time_vars(env):
        out[f"env {name}"] = env[name]
    return out


#: What installing, upgrading or removing a package changes in a ``sys.path`` folder.
_INSTALL_SUFFIXES = (".dist-info", ".egg-info", ".egg-link", ".pth")


def _installed(folder: str) -> str | None:
    """A hash of the distributions installed in ``folder`` (their metadata entries and
    when each was written), or None when it is not a folder. Other files do not count:
    the folder of an editable project changes all the time without an install."""
    try:
        with os.scandir(folder) as it:
            found = sorted(
                (e.name, e.stat(follow_symlinks=False).st_mtime_ns)
                for e in it
                if e.name.endswith(_INSTALL_SUFFIXES)
            )
    except OSError:
        return None
    return hashlib.sha256(repr(found).encode()).hexdigest()[:16]


def digest(p: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(p), sort_keys=True).encode()).hexdigest()[:16]


def what_changed(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    """``packages were installed or removed in /x/site-packages`` and the like."""
    said: list[str] = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        kind, _, name = key.partition(" ")
        if kind == "interpreter":
            said.append("the interpreter changed")
        elif kind == "path" and key in old and key in new:
            said.append(f"packages were installed or removed in {name}")
        elif kind == "path":
            said.append(f"{name} was {'added to' if key in new else 'removed from'} sys.path")
        else:
            said.append(f"{name} changed")
    if not said:
        return "the environment changed"
    return "; ".join(said[:3]) + (f" (and {len(said) - 3} more)" if len(said) > 3 else "")
