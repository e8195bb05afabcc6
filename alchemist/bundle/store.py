"""Writing a bundle into a job directory, and loading it back in a worker."""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import inspect
import json
import os
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import cloudpickle

from alchemist.bundle.builder import Bundle
from alchemist.errors import BundleError
from alchemist.job.jobdir import atomic_write_bytes, atomic_write_json


def write_bundle(bundle: Bundle, directory: Path) -> str:
    """Store ``bundle`` in ``directory``; returns its sha256 digest."""
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(directory / "source.py", bundle.source.encode())
    atomic_write_bytes(directory / "namespace.pkl", bundle.payload)
    for rel, data in bundle.files.items():
        atomic_write_bytes(directory / FILES_DIR / rel, data)
    if bundle.data is not None:
        _copy_data(bundle, directory / WORKDIR)
    manifest = {
        "sha256": bundle.digest,
        "entry": bundle.entry,
        "cwd": bundle.cwd,
        "imports": [list(pair) for pair in bundle.imports],
        "items": [dataclasses.asdict(i) for i in bundle.items],
        "files": sorted(bundle.files),
        "data": None if bundle.data is None else sorted(bundle.data.sizes),
    }
    atomic_write_json(directory / "manifest.json", manifest)
    return bundle.digest


#: The bundle's folder of the notebook's own modules (see :mod:`alchemist.bundle.workspace`).
FILES_DIR = "files"
#: The bundle's copy of the notebook's folder, for workers that cannot see the folder
#: (see :mod:`alchemist.bundle.datafiles`); they start in it.
WORKDIR = "workdir"


def _copy_data(bundle: Bundle, target: Path) -> None:
    """Copy the files the dry run listed; one that changed size meanwhile is refused."""
    assert bundle.data is not None
    root = Path(bundle.data.root)
    target.mkdir(parents=True, exist_ok=True)
    for rel, size in bundle.data.sizes.items():
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(root / rel, dest)
        except OSError as e:
            raise BundleError(
                f"{root / rel} could not be copied for the workers ({e.strerror or e});"
                " nothing was submitted"
            ) from None
        if dest.stat().st_size != size:
            raise BundleError(
                f"{root / rel} changed while it was being copied for the workers: submit"
                " again once it is written (nothing was submitted)"
            )


def read_manifest(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "manifest.json").read_text())


def enter_workspace(directory: Path) -> None:
    """Set a worker up as the notebook was: in its folder, with its own modules first
    on ``sys.path``. Call before :func:`load_bundle`: unpickling a class from the
    notebook's ``model.py`` imports ``model``.

    The working directory is the bundle's copy of the notebook's folder where one was
    shipped (Kubernetes pods, which cannot see the folder), else the notebook's folder
    (the local backend), so data files open by the same relative paths; the shipped
    copies of its modules come first, so the job runs the code as it was submitted.
    """
    manifest = read_manifest(directory)
    cwd = manifest.get("cwd")
    if manifest.get("data") is not None and (directory / WORKDIR).is_dir():
        cwd = str(directory / WORKDIR)
    if cwd and Path(cwd).is_dir():
        os.chdir(cwd)
        sys.path.insert(0, cwd)
    if manifest.get("files") and (directory / FILES_DIR).is_dir():
        sys.path.insert(0, str(directory / FILES_DIR))


def _rebind(fn: types.FunctionType, ns: dict[str, Any]) -> types.FunctionType:
    """A copy of a notebook function whose globals are the job's namespace.

    In the notebook such a function sees every global the notebook defines, including
    ones the cell assigns later; cloudpickle gives it a private globals dict instead.
    """
    new = types.FunctionType(fn.__code__, ns, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__dict__.update(fn.__dict__)
    new.__doc__ = fn.__doc__
    new.__qualname__ = fn.__qualname__
    new.__annotations__ = fn.__annotations__
    new.__module__ = "__main__"
    return new


def load_bundle(directory: Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Rebuild a worker's namespace.

    Returns:
        ``(source, namespace, manifest)``; the namespace is a fresh ``__main__``
        dict with the bundle's imports and values.

    Raises:
        BundleError: a module the cell imports is not installed on the worker.
    """
    manifest = read_manifest(directory)
    source = (directory / "source.py").read_text()
    ns: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    for alias, module in manifest["imports"]:
        try:
            ns[alias] = importlib.import_module(module)
        except ImportError as e:
            raise BundleError(
                f"the cell uses module {module!r}, which is not installed where the workers"
                f" run ({e}); install it in the worker environment or image"
            ) from e
    values = cloudpickle.loads((directory / "namespace.pkl").read_bytes())
    for value in values.values():
        if inspect.isfunction(value) and value.__module__ == "__main__":
            for k, v in value.__globals__.items():
                ns.setdefault(k, v)
    for name, value in values.items():
        ns[name] = value
    for name, value in list(ns.items()):
        if inspect.isfunction(value) and value.__module__ == "__main__" and name in values:
            ns[name] = _rebind(value, ns)
    return source, ns, manifest


#: In the job's bundle folder: ``[script name, arg, ...]`` for a script's ``sys.argv``.
ARGV_FILE = "argv.json"


def write_argv(bundle_dir: Path, script: str, args: list[str]) -> None:
    """Keep a script's ``sys.argv`` with its bundle (read by :func:`set_argv`)."""
    atomic_write_json(bundle_dir / ARGV_FILE, [script, *args])


def script_name(bundle_dir: Path) -> str | None:
    """The script a job runs, as its command line names it (None: a cell's bundle)."""
    try:
        argv = json.loads((bundle_dir / ARGV_FILE).read_text())
    except (OSError, ValueError):
        return None
    return str(argv[0]) if isinstance(argv, list) and argv else None


def set_argv(bundle_dir: Path) -> str | None:
    """Set ``sys.argv`` for a script from its bundle; returns the script's name (or None
    where the bundle is a cell's)."""
    path = bundle_dir / ARGV_FILE
    if not path.is_file():
        return None
    argv = [str(a) for a in json.loads(path.read_text())]
    sys.argv = argv
    return argv[0]
