"""Which names a cell reads from the notebook namespace.

Uses :mod:`symtable`, the compiler's own scope analysis, so nested functions,
comprehensions, ``global`` statements and class bodies are handled as Python does.
A name bound at the cell's top level is still free if the cell reads it before it
binds it (``x = x + 1``), which we decide by source position.
"""

from __future__ import annotations

import ast
import symtable


def _module_level_reads(table: symtable.SymbolTable, out: set[str]) -> None:
    """Collect names that refer to module globals from nested scopes."""
    for child in table.get_children():
        for sym in child.get_symbols():
            if sym.is_global() and sym.is_referenced():
                out.add(sym.get_name())
        _module_level_reads(child, out)


def _first_positions(tree: ast.AST) -> tuple[dict[str, int], dict[str, int]]:
    """First load and first store position (as a sortable offset) of each top-level name."""
    loads: dict[str, int] = {}
    stores: dict[str, int] = {}

    def pos(node: ast.AST) -> int:
        return getattr(node, "lineno", 0) * 100_000 + getattr(node, "col_offset", 0)

    def end(node: ast.AST) -> int:
        return (getattr(node, "end_lineno", 0) or 0) * 100_000 + (
            getattr(node, "end_col_offset", 0) or 0
        )

    class Visitor(ast.NodeVisitor):
        def visit_Name(self, node: ast.Name) -> None:
            table = loads if isinstance(node.ctx, ast.Load) else stores
            table.setdefault(node.id, pos(node))

        def _store_targets(self, targets: list[ast.expr], at: int) -> None:
            # A target is bound only after the right-hand side ran: date it at the end.
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                        stores.setdefault(n.id, at)
                    elif isinstance(n, ast.Name):
                        self.visit(n)

        def visit_Assign(self, node: ast.Assign) -> None:
            self.visit(node.value)
            self._store_targets(node.targets, end(node))

        def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
            if node.value is not None:
                self.visit(node.value)
            self._store_targets([node.target], end(node))

        def visit_AugAssign(self, node: ast.AugAssign) -> None:
            if isinstance(node.target, ast.Name):
                loads.setdefault(node.target.id, pos(node.target))
            self.visit(node.value)
            self._store_targets([node.target], end(node))

        def visit_For(self, node: ast.For) -> None:
            self.visit(node.iter)
            self._store_targets([node.target], end(node.iter))
            for stmt in [*node.body, *node.orelse]:
                self.visit(stmt)

        def _bind(self, node: ast.AST, name: str) -> None:
            stores.setdefault(name, pos(node))

        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            for d in node.decorator_list:
                self.visit(d)
            self._bind(node, node.name)

        visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

        def visit_ClassDef(self, node: ast.ClassDef) -> None:
            for b in [*node.bases, *node.decorator_list]:
                self.visit(b)
            self._bind(node, node.name)

        def visit_Import(self, node: ast.Import) -> None:
            for alias in node.names:
                self._bind(node, (alias.asname or alias.name).split(".")[0])

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            for alias in node.names:
                self._bind(node, alias.asname or alias.name)

    Visitor().visit(tree)
    return loads, stores


def free_names(source: str, filename: str = "<cell>") -> list[str]:
    """Names the code reads from its enclosing (notebook) namespace, sorted.

    Raises:
        SyntaxError: the source does not compile.
    """
    tree = ast.parse(source, filename)
    table = symtable.symtable(source, filename, "exec")
    reads: set[str] = set()
    top_assigned: set[str] = set()
    for sym in table.get_symbols():
        if sym.is_referenced():
            reads.add(sym.get_name())
        if sym.is_assigned() or sym.is_imported():
            top_assigned.add(sym.get_name())
    nested: set[str] = set()
    _module_level_reads(table, nested)

    loads, stores = _first_positions(tree)
    free = set()
    for name in reads:
        if name not in top_assigned or (name in loads and loads[name] < stores.get(name, 1 << 62)):
            free.add(name)
    # Functions defined in the cell read globals when called, i.e. after the cell's
    # own bindings; only names the cell never binds come from the notebook.
    free.update(n for n in nested if n not in top_assigned)
    # Builtins stay in the list: the notebook may shadow one (``input = ...``); the bundle
    # builder ships only names the namespace really holds.
    return sorted(free)
