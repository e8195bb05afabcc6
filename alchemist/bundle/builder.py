"""Build a :class:`Bundle` from a cell's source and the notebook namespace."""

from __future__ import annotations

import hashlib
import inspect
import os
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import cloudpickle

from alchemist.bundle.freenames import free_names
from alchemist.bundle.sizes import human_size
from alchemist.errors import BundleError

if TYPE_CHECKING:
    from alchemist.bundle.datafiles import DataFiles

#: Names IPython puts in the user namespace that a cell never means to ship.
_IPYTHON_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "_", "__", "___", "_ih", "_oh", "_dh"}

#: The variable a function job's callable travels under.
FUNCTION_VAR = "__alchemist_fn__"


@dataclass
class BundleItem:
    """One name the workers get. ``kind`` is module, function, class or value."""

    name: str
    kind: str
    detail: str
    size: int = 0


@dataclass
class Bundle:
    """Everything a worker needs to run the cell.

    Attributes:
        source: the Python source to execute.
        entry: ``cell``, ``script`` or ``function``.
        imports: ``(alias, module)`` pairs re-imported on the worker.
        items: what travels, for the dry run and the manifest.
        payload: cloudpickle of the shipped values (one dump, so functions share globals).
        cwd: the notebook's working directory (workers start there when it exists).
        files: the user's own modules that travel, relative path → contents
            (:mod:`alchemist.bundle.workspace`).
        data: the notebook folder's files that travel, for a backend whose workers
            cannot see that folder (:mod:`alchemist.bundle.datafiles`); None: none travel.
    """

    source: str
    entry: str
    imports: list[tuple[str, str]]
    items: list[BundleItem]
    payload: bytes
    cwd: str = field(default_factory=os.getcwd)
    files: dict[str, bytes] = field(default_factory=dict)
    data: DataFiles | None = None

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        h.update(self.entry.encode())
        h.update(self.source.encode())
        for alias, mod in self.imports:
            h.update(f"{alias}={mod};".encode())
        h.update(self.payload)
        for rel in sorted(self.files):
            h.update(rel.encode() + b"\0" + hashlib.sha256(self.files[rel]).digest())
        if self.data is not None:  # by name, size and time: data may be big to hash
            for rel in sorted(self.data.sizes):
                h.update(f"{rel}\0{self.data.sizes[rel]}\0{self.data.stamps[rel]};".encode())
        return h.hexdigest()

    def describe(self) -> str:
        """The bundle's contents, one line each, for ``--dry-run``."""
        lines = [f"bundle sha256:{self.digest[:16]}  entry={self.entry}  cwd={self.cwd}"]
        for item in self.items:
            size = f"  {human_size(item.size)}" if item.kind not in ("module",) else ""
            lines.append(f"  {item.kind:<8} {item.name:<20} {item.detail}{size}")
        if not self.items:
            lines.append("  (the cell uses nothing from the notebook)")
        if self.files:
            total = sum(len(b) for b in self.files.values())
            lines.append(
                f"  files    {len(self.files)} of the notebook's own code, {human_size(total)}:"
                f" {', '.join(sorted(self.files)[:8])}" + (" ..." if len(self.files) > 8 else "")
            )
        if self.data is not None:
            names = sorted(self.data.sizes)
            lines.append(
                f"  data     {len(names)} files of {self.data.root}, {human_size(self.data.total)}"
                " (the workers start in a copy of it)"
                + (
                    f": {', '.join(names[:8])}" + (" ..." if len(names) > 8 else "")
                    if names
                    else ""
                )
            )
        return "\n".join(lines)


def _check_syntax(source: str, entry: str) -> None:
    try:
        compile(source, f"<{entry}>", "exec")
    except SyntaxError as e:
        where = f"line {e.lineno}" if e.lineno else "the cell"
        raise BundleError(
            f"syntax error in the {entry} at {where}: {e.msg}; fix it and run again"
            " (nothing was submitted)"
        ) from None


def _reject_ipython_syntax(source: str) -> None:
    """Magics and shell escapes need an IPython shell, which workers do not run."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - IPython is a dependency
        return
    transformed = TransformerManager().transform_cell(source)
    if "get_ipython()" in transformed and "get_ipython()" not in source:
        for n, (before, after) in enumerate(
            zip(source.splitlines(), transformed.splitlines(), strict=False), start=1
        ):
            if before != after:
                if before.strip().startswith("%run"):
                    raise BundleError(
                        f"line {n} of the cell is a %run, which workers cannot run among other"
                        " lines: to run a script as the job, make `%run script.py ARGS` the"
                        " cell's only line (nothing was submitted)"
                    )
                raise BundleError(
                    f"line {n} of the cell uses IPython syntax (a magic or a ! shell command),"
                    " which workers cannot run: move it to another cell (nothing was submitted)"
                )
        raise BundleError(
            "the cell uses IPython syntax (a magic or a ! shell command), which workers cannot"
            " run: move it to another cell (nothing was submitted)"
        )


def _classify(name: str, value: Any) -> tuple[str, str]:
    if inspect.isclass(value):
        where = "notebook" if value.__module__ == "__main__" else value.__module__
        return "class", f"{value.__qualname__} (from {where})"
    if inspect.isfunction(value) or inspect.isbuiltin(value):
        where = "notebook" if value.__module__ == "__main__" else value.__module__
        return "function", f"{value.__qualname__} (from {where})"
    return "value", type(value).__qualname__


def build_bundle(
    source: str,
    namespace: dict[str, Any] | None = None,
    *,
    entry: str = "cell",
    max_value_bytes: int,
    function: Any = None,
    cwd: str | None = None,
    ship_data: bool = False,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    max_data_bytes: int | None = None,
) -> Bundle:
    """Decide what of ``namespace`` the ``source`` needs, and pack it.

    Args:
        source: cell or script source. For ``entry="function"`` it is generated.
        namespace: the notebook's user namespace (``shell.user_ns``); None for scripts.
        entry: ``cell``, ``script`` or ``function``.
        max_value_bytes: the largest pickled size of one shipped value, and of the
            notebook's own modules together.
        function: the callable of a function job.
        cwd: the notebook's (or script's) folder; default: the current directory.
        ship_data: the workers cannot see ``cwd`` (Kubernetes pods): its files travel
            too, chosen by ``include``/``exclude`` and ``.alchemistignore``, at most
            ``max_data_bytes`` together (default ``ALCHEMIST_MAX_DATA_BYTES``).

    Raises:
        BundleError: syntax error, IPython syntax in a cell, a value that cannot be
            pickled or is over the limit (naming the variable and the fix), or the
            notebook's own modules over the limit, or its folder's files over theirs.
        SpecError: an invalid ``include`` or ``exclude`` pattern.
    """
    from alchemist.bundle.workspace import (
        imported_top_levels,
        referenced_top_levels,
        workspace_files,
    )

    cwd = cwd or os.getcwd()
    namespace = namespace or {}
    if entry == "function":
        namespace = {FUNCTION_VAR: function}
        source = f"result = {FUNCTION_VAR}()\n"
    if entry == "cell":
        _reject_ipython_syntax(source)
    _check_syntax(source, entry)

    imports: list[tuple[str, str]] = []
    items: list[BundleItem] = []
    values: dict[str, Any] = {}
    for name in free_names(source):
        if name not in namespace or name in _IPYTHON_NAMES or name.startswith("_i"):
            continue
        value = namespace[name]
        if isinstance(value, types.ModuleType):
            imports.append((name, value.__name__))
            items.append(BundleItem(name, "module", f"import {value.__name__}"))
            continue
        kind, detail = _classify(name, value)
        try:
            blob = cloudpickle.dumps(value)
        except Exception as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise BundleError(
                f"variable {name!r} ({type(value).__qualname__}) cannot be sent to the workers"
                f" ({reason}): create it inside the cell instead (nothing was submitted)"
            ) from None
        if len(blob) > max_value_bytes:
            raise BundleError(
                f"variable {name!r} is {human_size(len(blob))}, over the {human_size(max_value_bytes)}"
                " limit for values shipped with a cell: load it inside the cell (e.g. from a"
                " file on shared storage) or raise ALCHEMIST_MAX_VALUE_BYTES (nothing was"
                " submitted)"
            )
        values[name] = value
        items.append(BundleItem(name, kind, detail, len(blob)))
    payload = cloudpickle.dumps(values)
    needed = imported_top_levels(source) | referenced_top_levels(
        values.values(), (module for _alias, module in imports)
    )
    files, _origins = workspace_files(needed, cwd, max_bytes=max_value_bytes)
    data = None
    if ship_data:
        from alchemist.bundle.datafiles import select_data_files
        from alchemist.job import config

        data = select_data_files(
            cwd,
            include=include,
            exclude=exclude,
            max_bytes=max_data_bytes if max_data_bytes is not None else config.max_data_bytes(),
            skip=[str(config.home())],
        )
    return Bundle(
        source=source,
        entry=entry,
        imports=imports,
        items=items,
        payload=payload,
        cwd=cwd,
        files=files,
        data=data,
    )


def source_of(path: os.PathLike[str] | str) -> tuple[str, str]:
    """Read a job's code from a file: a ``.py`` script or a notebook's code cells in order.

    Returns:
        ``(source, entry)``.

    Raises:
        BundleError: the file is missing, of another type, or a notebook with magics.
    """
    from pathlib import Path

    p = Path(path)
    try:
        if not p.is_file():
            raise BundleError(f"{p} does not exist or is not a file")
    except (OSError, ValueError):  # a NUL byte, a name too long
        raise BundleError(f"{str(p)!r} is not a usable file name") from None
    if p.suffix == ".py":
        try:
            return p.read_text(), "script"
        except UnicodeDecodeError:
            raise BundleError(
                f"{p.name} is not a text file (UTF-8): it cannot run as a script"
            ) from None
    if p.suffix == ".ipynb":
        import json

        try:
            nb = json.loads(p.read_text())
            raw_cells = nb.get("cells", [])
            if not isinstance(raw_cells, list):
                raise TypeError("its cells are not a list")
            cells = [
                "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                for c in raw_cells
                if c.get("cell_type") == "code"
            ]
            if not all(isinstance(c, str) for c in cells):
                raise TypeError("a cell's source is not text")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise BundleError(f"{p.name} is not a readable notebook ({e})") from None
        kept = []
        for n, cell in enumerate(cells, start=1):
            stripped = cell.lstrip()
            if stripped.startswith("%%"):
                # A cell magic: run its body (e.g. a %%alchemist_distributed cell's code).
                cell = cell.split("\n", 1)[1] if "\n" in cell else ""
            try:
                _reject_ipython_syntax(cell)
            except BundleError:
                raise BundleError(
                    f"code cell {n} of {p.name} uses IPython syntax (a magic or a ! command):"
                    " remove it to run the notebook as a job"
                ) from None
            kept.append(cell)
        return "\n\n".join(kept) + "\n", "script"
    raise BundleError(f"{p.name}: only .py scripts and .ipynb notebooks can run as jobs")
