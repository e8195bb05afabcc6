"""What a sweep varies: one :class:`Param` per swept name, read from ``NAME=SPEC`` text.

The text forms (``--param`` on ``%%alchemist_sweep`` and in the REST body; the Python
API takes the same strings or the constructors below):

- ``lr=0.1,0.01,0.001`` or ``act=["relu", "gelu"]``: a list of values (Python literals;
  a bare word is a string), tried one by one in a grid;
- ``batch=range(16,129,16)``: whole numbers as ``range`` gives them (a list too);
- ``lr=loguniform(1e-4,1e-1)``, ``p=uniform(0,0.5)``: numbers drawn between two bounds,
  log-uniformly or uniformly;
- ``width=int(32,512)``, ``width=logint(32,512)``: whole numbers drawn between two bounds
  (both included).

Lists and ranges make a grid (every combination, :func:`grid_size`); draws need a
sampler that draws (``random``, ``tpe``) and a number of trials. Each :class:`Param`
turns into the Optuna distribution that Optuna's samplers draw from
(:meth:`Param.distribution`), so the search itself is Optuna's.

This module imports nothing of Alchemist but its errors, and no Optuna until a
distribution is asked for: the magic, the CLI and the server read specs cheaply.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import Any

from alchemist.errors import SpecError

#: The kinds of a swept name: a list of values, or a draw between two bounds.
KINDS = ("choice", "uniform", "loguniform", "int", "logint")
#: The most trials a sweep may have: a larger grid is refused (draw from it instead).
MAX_TRIALS = 10_000
#: The most values one list may have.
MAX_CHOICES = 1_000

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CALL = re.compile(r"(range|uniform|loguniform|int|logint)\((.*)\)", re.S)


@dataclass(frozen=True)
class Param:
    """One swept name and the values it may take.

    Attributes:
        name: the cell's variable (a top-level assignment ``name = ...``).
        kind: one of :data:`KINDS`.
        choices: the values of a ``choice`` (Python literals, in order).
        low: the lower bound of a draw.
        high: the upper bound of a draw (included for ``int``/``logint``).
    """

    name: str
    kind: str
    choices: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0

    @property
    def is_grid(self) -> bool:
        """A list of values (a grid can enumerate it), not a draw."""
        return self.kind == "choice"

    def describe(self) -> str:
        """The spec as a user writes it (``lr=loguniform(0.0001,0.1)``)."""
        if self.kind == "choice":
            return f"{self.name}=" + ",".join(repr(v) for v in self.choices)
        low, high = (int(self.low), int(self.high)) if "int" in self.kind else (self.low, self.high)
        return f"{self.name}={self.kind}({low},{high})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "choices": list(self.choices),
            "low": self.low,
            "high": self.high,
            "spec": self.describe(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Param:
        return cls(
            data["name"], data["kind"], tuple(data.get("choices") or ()), data["low"], data["high"]
        )

    def distribution(self) -> Any:
        """The Optuna distribution of this name (imports Optuna)."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        if self.kind == "choice":
            return CategoricalDistribution(list(self.choices))
        if self.kind in ("int", "logint"):
            return IntDistribution(int(self.low), int(self.high), log=self.kind == "logint")
        return FloatDistribution(self.low, self.high, log=self.kind == "loguniform")


def choice(name: str, values: list[Any] | tuple[Any, ...]) -> Param:
    """A list of values, tried one by one (a grid of them)."""
    return _checked_choice(name, tuple(values))


def draw(name: str, kind: str, low: float, high: float) -> Param:
    """Numbers drawn between ``low`` and ``high`` (``kind``: uniform, loguniform, int, logint)."""
    if kind not in KINDS[1:]:
        raise SpecError(
            f"--param {name}: {kind!r} is not a draw: use one of {', '.join(KINDS[1:])}"
        )
    return _checked_draw(name, kind, low, high)


def parse_param(text: str) -> Param:
    """One ``NAME=SPEC`` (see the module's docstring).

    Raises:
        SpecError: one line naming what is wrong and the forms that are right.
    """
    name, sep, spec = text.partition("=")
    name, spec = name.strip(), spec.strip()
    if not sep or not _NAME.fullmatch(name):
        raise SpecError(
            f"--param {text!r}: write NAME=VALUES, e.g. lr=loguniform(1e-4,1e-1) or"
            " batch_size=32,64,128 (NAME is a variable the cell sets)"
        )
    if not spec:
        raise SpecError(f"--param {name}: no values after '='")
    call = _CALL.fullmatch(spec)
    if call is not None:
        kind, inner = call.group(1), call.group(2)
        numbers = _literal_list(name, inner)
        if not all(_is_number(v) for v in numbers):
            raise SpecError(f"--param {name}: {kind}(...) takes numbers, got {inner!r}")
        if kind == "range":
            if not 1 <= len(numbers) <= 3 or not all(isinstance(v, int) for v in numbers):
                raise SpecError(f"--param {name}: range takes 1 to 3 whole numbers, got {inner!r}")
            steps = range(*numbers)
            if len(steps) > MAX_CHOICES:
                raise SpecError(
                    f"--param {name}: range{tuple(numbers)} has {len(steps)} values (at most"
                    f" {MAX_CHOICES}); draw from it instead: {name}=int({steps.start},"
                    f"{steps[-1]})"
                )
            return _checked_choice(name, tuple(steps))
        if len(numbers) != 2:
            raise SpecError(f"--param {name}: {kind} takes two bounds, e.g. {kind}(1,10)")
        return _checked_draw(name, kind, numbers[0], numbers[1])
    if spec.startswith("[") or spec.startswith("("):
        values = _literal_list(name, spec[1:-1] if spec[-1:] in "])" else spec)
    else:
        values = _literal_list(name, spec, bare_words=True)
    return _checked_choice(name, tuple(values))


def parse_params(texts: list[str]) -> list[Param]:
    """Every ``--param``; a name given twice is refused."""
    params = [parse_param(t) for t in texts]
    seen: set[str] = set()
    for p in params:
        if p.name in seen:
            raise SpecError(f"--param {p.name} is given twice: give each name once")
        seen.add(p.name)
    if not params:
        raise SpecError("a sweep needs at least one --param NAME=VALUES (e.g. lr=0.1,0.01)")
    return params


def grid_size(params: list[Param]) -> int | None:
    """How many combinations the lists make (None: a name is drawn, there is no grid)."""
    if not all(p.is_grid for p in params):
        return None
    return math.prod(len(p.choices) for p in params)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _literal_list(name: str, text: str, bare_words: bool = False) -> list[Any]:
    """The comma-separated Python literals of ``text`` (``bare_words``: ``relu`` is
    the string ``"relu"``)."""
    try:
        tree = ast.parse(f"({text},)", mode="eval")
    except SyntaxError:
        tree = None
    if tree is not None and isinstance(tree.body, ast.Tuple):
        out = []
        for node in tree.body.elts:
            if bare_words and isinstance(node, ast.Name):
                out.append(node.id)
                continue
            try:
                out.append(ast.literal_eval(node))
            except (ValueError, SyntaxError, TypeError):
                break
        else:
            return out
    raise SpecError(
        f"--param {name}: cannot read {text!r}: give Python literals separated by commas"
        " (0.1,0.01 or 'relu','gelu'), range(a,b), uniform(a,b), loguniform(a,b), int(a,b)"
        " or logint(a,b)"
    )


def _checked_choice(name: str, values: tuple[Any, ...]) -> Param:
    if not _NAME.fullmatch(name):
        raise SpecError(f"--param: {name!r} is not a Python variable name")
    if not values:
        raise SpecError(f"--param {name}: the list of values is empty")
    if len(values) > MAX_CHOICES:
        raise SpecError(f"--param {name}: {len(values)} values (at most {MAX_CHOICES})")
    for v in values:
        if not isinstance(v, (int, float, str, bool, type(None))):
            raise SpecError(
                f"--param {name}: {v!r} is a {type(v).__name__}; a swept value is a number,"
                " a string, True/False or None"
            )
        if isinstance(v, float) and not math.isfinite(v):
            raise SpecError(f"--param {name}: {v!r} is not a finite number")
    if len(set(map(repr, values))) != len(values):
        raise SpecError(f"--param {name}: a value is listed twice")
    return Param(name, "choice", values)


def _checked_draw(name: str, kind: str, low: float, high: float) -> Param:
    if not _NAME.fullmatch(name):
        raise SpecError(f"--param: {name!r} is not a Python variable name")
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        raise SpecError(f"--param {name}: {kind}({low},{high}) needs finite bounds, low < high")
    if kind.startswith("log") and low <= 0:
        raise SpecError(f"--param {name}: {kind} needs bounds above 0, got {low}")
    if kind in ("int", "logint") and not (float(low).is_integer() and float(high).is_integer()):
        raise SpecError(f"--param {name}: {kind} takes whole-number bounds, got ({low},{high})")
    return Param(name, kind, (), float(low), float(high))
