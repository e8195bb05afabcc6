"""The notebook folder's data files, shipped to workers that cannot see that folder.

On the local backend a job runs in the notebook's folder, so ``open("data/x.csv")``
finds the file where it is. A Kubernetes worker pod mounts the user's Alchemist home,
not the notebook's folder, so the files under that folder travel with the bundle
(``bundle/workdir/``) and the worker starts there: the same relative paths work.

What travels is every file under the folder except:

- hidden files and folders, ``__pycache__``, ``.ipynb_checkpoints``, ``*.pyc``;
- what the folder's ``.alchemistignore`` lists (``.gitignore`` syntax, read with
  ``pathspec``, the library git-style tools use);
- what ``--exclude`` patterns match, and, when ``--include`` is given, what it does
  not match (same syntax).

A folder whose files weigh more than the limit (``ALCHEMIST_MAX_DATA_BYTES``, default
100 MB) or number more than 10,000 is refused in one line naming the biggest files and
the fix: exclude them, or read big data from a dataset volume.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from alchemist.bundle.sizes import human_size
from alchemist.errors import BundleError
from alchemist.job.patterns import compile_patterns

#: The ignore file read from the notebook's folder.
IGNORE_FILE = ".alchemistignore"
#: Folders and files that never travel.
_SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints", "node_modules"}
#: The most files a folder may ship.
MAX_FILES = 10_000


@dataclass
class DataFiles:
    """What of the notebook's folder travels.

    Attributes:
        root: the folder.
        sizes: path relative to ``root`` (POSIX) → size in bytes.
        stamps: path → modification time (ns), for the bundle's digest.
    """

    root: str
    sizes: dict[str, int] = field(default_factory=dict)
    stamps: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.sizes.values())


def _ignore_file(root: Path) -> pathspec.PathSpec | None:
    path = root / IGNORE_FILE
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    try:
        return pathspec.PathSpec.from_lines("gitwildmatch", lines)
    except ValueError as e:
        raise BundleError(f"{path} has a pattern that is not valid: {e}") from None


def select_data_files(
    root: str,
    *,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    max_bytes: int,
    skip: Sequence[str] = (),
) -> DataFiles:
    """The files under ``root`` that travel (see the module's docstring).

    Args:
        root: the notebook's (or script's) folder.
        include: only files matching one of these patterns travel (all when empty).
        exclude: files matching one of these never travel.
        max_bytes: the most the files may weigh together.
        skip: folders that never travel (Alchemist's own home, if it is under ``root``).

    Raises:
        BundleError: over the size or file-count limit (naming the biggest files and
            the fix), or a bad ``.alchemistignore``.
        SpecError: an invalid ``include`` or ``exclude`` pattern.
    """
    base = Path(root)
    wanted = compile_patterns(include, "--include")
    unwanted = compile_patterns(exclude, "--exclude")
    ignored = _ignore_file(base)
    skipped = {os.path.realpath(s) for s in skip}
    out = DataFiles(root=str(base))
    if not base.is_dir():
        return out
    for dirpath, dirnames, filenames in os.walk(base):
        rel_dir = Path(dirpath).relative_to(base)
        kept = []
        for d in dirnames:
            rel = (rel_dir / d).as_posix() + "/"
            full = os.path.join(dirpath, d)
            if d.startswith(".") or d in _SKIP_DIRS or os.path.islink(full):
                continue
            if os.path.realpath(full) in skipped:
                continue
            if any(s is not None and s.match_file(rel) for s in (ignored, unwanted)):
                continue
            kept.append(d)
        dirnames[:] = sorted(kept)
        for name in sorted(filenames):
            if name.startswith(".") or name.endswith(".pyc"):
                continue
            rel = (rel_dir / name).as_posix()
            if any(s is not None and s.match_file(rel) for s in (ignored, unwanted)):
                continue
            if wanted is not None and not wanted.match_file(rel):
                continue
            try:
                st = os.stat(os.path.join(dirpath, name))
            except OSError:
                continue  # a dangling link, a file removed meanwhile
            if not os.path.isfile(os.path.join(dirpath, name)):
                continue  # a socket or fifo
            out.sizes[rel] = st.st_size
            out.stamps[rel] = st.st_mtime_ns
            if len(out.sizes) > MAX_FILES:
                raise BundleError(
                    f"the folder {base} holds more than {MAX_FILES} files to ship to the"
                    f" workers: list what the job does not read in {base / IGNORE_FILE},"
                    " or pass --include with the files it reads (nothing was submitted)"
                )
    if out.total > max_bytes:
        biggest = sorted(out.sizes, key=lambda r: -out.sizes[r])[:3]
        named = ", ".join(f"{r} {human_size(out.sizes[r])}" for r in biggest)
        raise BundleError(
            f"the files under {base} weigh {human_size(out.total)} ({named}), over the"
            f" {human_size(max_bytes)} limit for files shipped to the workers: --exclude"
            f" {biggest[0]!r} (or list it in {IGNORE_FILE}) and read big data from a"
            " dataset volume or the Alchemist home, or raise ALCHEMIST_MAX_DATA_BYTES"
            " (nothing was submitted)"
        )
    return out
