"""Promoting a cell: free names, what travels how, and the errors a user can fix."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from alchemist.bundle import build_bundle, free_names, load_bundle, source_of, write_bundle
from alchemist.errors import BundleError

LIMIT = 1 << 20


def test_free_names_follow_python_scoping() -> None:
    src = """
import os
x = x + 1          # read before bound: free
for i in range(3):
    print(i)       # bound by the loop: not free
y = 2
print(y)           # bound before read: not free
def f(a):
    return a + scale + y   # scale is a notebook global; y is bound by the cell
class C(Base):
    pass
total = sum(v for v in values)
"""
    assert free_names(src) == sorted(["x", "print", "range", "scale", "Base", "sum", "values"])


def test_modules_travel_as_imports_and_functions_by_value(tmp_path) -> None:
    # Define the helper as a notebook cell does: in a __main__ namespace.
    notebook: dict = {"__name__": "__main__", "np": np}
    exec("factor = 3\ndef helper(v):\n    return v * factor\n", notebook)
    notebook["unused"] = object()
    bundle = build_bundle("out = helper(np.float64(2))", notebook, max_value_bytes=LIMIT)
    kinds = {i.name: i.kind for i in bundle.items}
    assert kinds == {"np": "module", "helper": "function"}
    assert ("np", "numpy") in bundle.imports

    write_bundle(bundle, tmp_path / "bundle")
    source, worker_ns, manifest = load_bundle(tmp_path / "bundle")
    assert manifest["sha256"] == bundle.digest
    # The helper's own global travelled with it, and it runs in the job's namespace.
    exec(compile(source, "<cell>", "exec"), worker_ns)
    assert worker_ns["out"] == 6.0


def test_digest_changes_with_the_data() -> None:
    a = build_bundle("print(v)", {"v": 1}, max_value_bytes=LIMIT)
    b = build_bundle("print(v)", {"v": 2}, max_value_bytes=LIMIT)
    assert a.digest != b.digest


def test_unpicklable_value_names_the_variable_and_the_fix() -> None:
    with pytest.raises(BundleError, match=r"variable 'lock' .* create it inside the cell"):
        build_bundle("print(lock)", {"lock": threading.Lock()}, max_value_bytes=LIMIT)


def test_value_over_the_limit_names_the_size_and_the_setting() -> None:
    big = np.zeros(1 << 18)  # 2 MB
    with pytest.raises(
        BundleError,
        match=r"variable 'big' is 2\.0 MB, over the 1\.0 MB limit.*ALCHEMIST_MAX_VALUE_BYTES",
    ):
        build_bundle("print(big.sum())", {"big": big}, max_value_bytes=LIMIT)


def test_syntax_error_gives_the_line() -> None:
    with pytest.raises(BundleError, match=r"syntax error in the cell at line 2"):
        build_bundle("a = 1\nb = (\n", {}, max_value_bytes=LIMIT)


def test_ipython_syntax_is_refused_with_the_line() -> None:
    with pytest.raises(BundleError, match=r"line 2 of the cell uses IPython syntax"):
        build_bundle("a = 1\n!ls\n", {}, max_value_bytes=LIMIT)


def test_notebook_source_runs_code_cells_in_order(tmp_path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# title"),
        nbformat.v4.new_code_cell("a = 1"),
        nbformat.v4.new_code_cell("%%alchemist_distributed -n 2\nb = a + 1"),
    ]
    path = tmp_path / "train.ipynb"
    nbformat.write(nb, path)
    source, entry = source_of(path)
    ns: dict = {}
    exec(source, ns)
    assert entry == "script" and ns["b"] == 2


def test_unknown_file_type_is_refused(tmp_path) -> None:
    p = tmp_path / "data.csv"
    p.write_text("a,b\n")
    with pytest.raises(BundleError, match=r"only \.py scripts and \.ipynb notebooks"):
        source_of(p)
