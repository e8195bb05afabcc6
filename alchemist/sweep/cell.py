"""The cell is the trial: its own top-level assignments are what a sweep sets.

A prototype cell says ``lr = 0.1``; a trial of a sweep over ``lr`` runs the same cell
with that one assignment's value replaced (``lr = 0.0031``), and nothing else changed:
the same cell runs in the kernel, as one job and as a sweep with no edit. The
replacement keeps every line where it was (a value written over several lines becomes
one parenthesised value padded with newlines), so a trial's traceback points at the
cell's own lines.

A swept name must be assigned exactly once at the top level of the cell (``name =
value`` or ``name: type = value``); anything else (not assigned, assigned twice, only
inside a function or a loop) is one clear error before anything runs.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from alchemist.errors import SpecError


def top_level_assignments(source: str) -> dict[str, list[ast.expr]]:
    """Every ``name = value`` at the cell's top level: name → the value nodes, in order."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise SpecError(f"the cell has a syntax error at line {e.lineno}: {e.msg}") from None
    found: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                found.setdefault(target.id, []).append(node.value)
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.value is not None
        ):
            found.setdefault(node.target.id, []).append(node.value)
    return found


def check_swept_names(source: str, names: list[str]) -> None:
    """Each of ``names`` is assigned exactly once at the cell's top level.

    Raises:
        SpecError: one line naming the first name that is not, and what the cell sets.
    """
    found = top_level_assignments(source)
    for name in names:
        values = found.get(name, [])
        if not values:
            settable = ", ".join(sorted(found)) or "nothing"
            raise SpecError(
                f"--param {name}: the cell never sets {name} at its top level (a line"
                f" `{name} = ...`), so a sweep cannot change it; the cell sets: {settable}"
            )
        if len(values) > 1:
            lines = ", ".join(str(v.lineno) for v in values)
            raise SpecError(
                f"--param {name}: the cell sets {name} {len(values)} times (lines {lines});"
                " a sweep replaces one assignment: keep one"
            )


def _literal(name: str, value: Any) -> str:
    text = repr(value)
    try:
        same = ast.literal_eval(text) == value
    except (ValueError, SyntaxError):
        same = False
    if not same:
        raise SpecError(f"--param {name}: {value!r} cannot be written in the cell as a literal")
    return text


def with_values(source: str, values: Mapping[str, Any]) -> str:
    """``source`` with each swept name's one top-level assignment set to ``values[name]``.

    Lines stay where they were. Raises :class:`SpecError` as :func:`check_swept_names`.
    """
    check_swept_names(source, list(values))
    found = top_level_assignments(source)
    lines = source.splitlines(keepends=True)
    # Replace from the end of the cell, so earlier positions stay valid.
    nodes = sorted(((found[n][0], n) for n in values), key=lambda p: (p[0].lineno, p[0].col_offset))
    for node, name in reversed(nodes):
        assert node.end_lineno is not None and node.end_col_offset is not None
        first, last = node.lineno - 1, node.end_lineno - 1
        text = _literal(name, values[name])
        if last > first:  # keep the line count: a parenthesised value may span lines
            text = "(" + text + "\n" * (last - first) + ")"
        head = _utf8_prefix(lines[first], node.col_offset)
        tail = _utf8_suffix(lines[last], node.end_col_offset)
        lines[first : last + 1] = [head + text + tail]
    return "".join(lines)


def _utf8_prefix(line: str, byte_offset: int) -> str:
    """The part of ``line`` before ``byte_offset`` (ast's offsets count UTF-8 bytes)."""
    return line.encode()[:byte_offset].decode()


def _utf8_suffix(line: str, byte_offset: int) -> str:
    return line.encode()[byte_offset:].decode()
