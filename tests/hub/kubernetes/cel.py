"""A small evaluator of the Common Expression Language (CEL) subset the chart's admission
policies use, the stand-in for the API server's CEL (no API server runs here, and no CEL
library is installed).

Supported, with CEL's semantics as the language definition and the Kubernetes CEL
reference give them:

- literals: strings ('...' or "...", with \\\\ \\' \\" escapes), integers, ``true``,
  ``false``, ``null``, lists ``[a, b]``;
- names (the activation's variables), field selection ``a.b`` and indexing ``a['k']``,
  ``a[0]``: a missing field or key is an *error*, not null;
- ``has(a.b)``: whether the field (map key) ``b`` is present in ``a``;
- ``size(x)`` and ``x.size()``; ``s.startsWith(t)``, ``s.endsWith(t)``,
  ``s.contains(t)``;
- ``!``, ``==``, ``!=`` (values of different types are unequal; a bool is never an
  int), ``<``, ``<=``, ``>``, ``>=`` on ints and strings, ``in`` (list element or map key),
  ``&&``, ``||``, ``c ? a : b``.

``&&`` and ``||`` are commutative about errors as in CEL: ``false && <error>`` is false,
``true || <error>`` is true, whichever side errs; otherwise the error propagates. A
non-bool operand of a logical operator is an error. Anything else (macros such as
``all``/``exists``, arithmetic, optional fields, maps literals, timestamps) is refused
when the expression is parsed, so an expression the stand-in cannot judge fails loudly
instead of being judged wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any


class CELError(Exception):
    """An expression that cannot be parsed, or an evaluation error (CEL's error value)."""


_TOKEN = re.compile(
    r"""\s*(?:
    (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<int>\d+)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|[!<>()\[\],.?:])
    )""",
    re.VERBOSE,
)

_KEYWORDS = {"true": True, "false": False, "null": None}
_METHODS = {"size", "startsWith", "endsWith", "contains"}
Node = tuple[Any, ...]


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise CELError(f"cannot parse {text[pos:]!r} (the stand-in's CEL subset)")
        pos = m.end()
        if m.group("str") is not None:
            body = m.group("str")[1:-1]
            out.append(("lit", re.sub(r"\\(.)", r"\1", body)))
        elif m.group("int") is not None:
            out.append(("lit", int(m.group("int"))))
        elif m.group("name") is not None:
            name = m.group("name")
            if name in _KEYWORDS:
                out.append(("lit", _KEYWORDS[name]))
            elif name == "in":
                out.append(("op", "in"))
            else:
                out.append(("name", name))
        else:
            out.append(("op", m.group("op")))
    out.append(("end", None))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, Any]:
        return self.toks[self.i]

    def take(self, value: str | None = None) -> tuple[str, Any]:
        tok = self.toks[self.i]
        if value is not None and tok != ("op", value):
            raise CELError(f"expected {value!r} in {self.text!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def at(self, value: str) -> bool:
        return self.peek() == ("op", value)

    def parse(self) -> Node:
        node = self.expr()
        if self.peek()[0] != "end":
            raise CELError(f"unexpected {self.peek()[1]!r} in {self.text!r}")
        return node

    def expr(self) -> Node:
        cond = self.logical("||", self.and_)
        if self.at("?"):
            self.take("?")
            yes = self.expr()
            self.take(":")
            return ("cond", cond, yes, self.expr())
        return cond

    def logical(self, op: str, operand: Callable[[], Node]) -> Node:
        node = operand()
        while self.at(op):
            self.take(op)
            node = (op, node, operand())
        return node

    def and_(self) -> Node:
        return self.logical("&&", self.relation)

    def relation(self) -> Node:
        node = self.unary()
        for op in ("==", "!=", "<", "<=", ">", ">=", "in"):
            if self.at(op):
                self.take(op)
                return (op, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.at("!"):
            self.take("!")
            return ("!", self.unary())
        return self.member()

    def args(self) -> list[Node]:
        self.take("(")
        out: list[Node] = []
        while not self.at(")"):
            out.append(self.expr())
            if not self.at(")"):
                self.take(",")
        self.take(")")
        return out

    def member(self) -> Node:
        node = self.primary()
        while True:
            if self.at("."):
                self.take(".")
                kind, name = self.take()
                if kind != "name":
                    raise CELError(f"expected a field name in {self.text!r}, got {name!r}")
                if self.at("("):
                    if name not in _METHODS:
                        raise CELError(f"the stand-in's CEL has no method {name}()")
                    node = ("call", name, [node, *self.args()])
                else:
                    node = ("select", node, name)
            elif self.at("["):
                self.take("[")
                index = self.expr()
                self.take("]")
                node = ("index", node, index)
            else:
                return node

    def primary(self) -> Node:
        kind, value = self.take()
        if kind == "lit":
            return ("lit", value)
        if kind == "name":
            if self.at("("):
                if value == "has":
                    (arg,) = self.args()
                    if arg[0] != "select":
                        raise CELError(f"has() needs a field selection, in {self.text!r}")
                    return ("has", arg[1], arg[2])
                if value != "size":
                    raise CELError(f"the stand-in's CEL has no function {value}()")
                return ("call", "size", self.args())
            return ("name", value)
        if (kind, value) == ("op", "("):
            node = self.expr()
            self.take(")")
            return node
        if (kind, value) == ("op", "["):
            items: list[Node] = []
            while not self.at("]"):
                items.append(self.expr())
                if not self.at("]"):
                    self.take(",")
            self.take("]")
            return ("list", items)
        raise CELError(f"unexpected {value!r} in {self.text!r}")


def parse(text: str) -> Node:
    """The syntax tree of ``text`` (raises CELError outside the supported subset)."""
    return _Parser(text).parse()


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "map"
    raise CELError(f"no CEL type for {value!r}")


def _equal(a: Any, b: Any) -> bool:
    if _type(a) != _type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _bool(value: Any, op: str) -> bool:
    if not isinstance(value, bool):
        raise CELError(f"no such overload: {op} on {_type(value)}")
    return value


def _field(obj: Any, name: Any) -> Any:
    if isinstance(obj, Mapping):
        if name not in obj:
            raise CELError(f"no such key: {name}")
        return obj[name]
    if isinstance(obj, list) and isinstance(name, int) and not isinstance(name, bool):
        if not 0 <= name < len(obj):
            raise CELError(f"index out of range: {name}")
        return obj[name]
    raise CELError(f"no such overload: {_type(obj)}[{_type(name)}]")


def _call(name: str, args: list[Any]) -> Any:
    if name == "size" and len(args) == 1 and isinstance(args[0], str | list | Mapping):
        return len(args[0])
    if name in ("startsWith", "endsWith", "contains") and len(args) == 2:
        s, t = args
        if isinstance(s, str) and isinstance(t, str):
            if name == "startsWith":
                return s.startswith(t)
            return s.endswith(t) if name == "endsWith" else t in s
    raise CELError(f"no such overload: {name}({', '.join(map(_type, args))})")


def _logical(op: str, left: Callable[[], Any], right: Callable[[], Any]) -> bool:
    decisive = op == "||"  # the value that decides the result alone
    results: list[bool | CELError] = []
    for side in (left, right):
        try:
            value = _bool(side(), op)
        except CELError as e:
            results.append(e)
            continue
        if value is decisive:
            return decisive
        results.append(value)
    for r in results:
        if isinstance(r, CELError):
            raise r
    return not decisive


def evaluate(node: Node, env: Mapping[str, Any]) -> Any:
    """The value of a parsed expression over the activation ``env`` (raises CELError)."""
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "name":
        if node[1] not in env:
            raise CELError(f"undeclared reference to {node[1]!r}")
        return env[node[1]]
    if kind == "list":
        return [evaluate(n, env) for n in node[1]]
    if kind == "select":
        return _field(evaluate(node[1], env), node[2])
    if kind == "index":
        return _field(evaluate(node[1], env), evaluate(node[2], env))
    if kind == "has":
        obj = evaluate(node[1], env)
        if not isinstance(obj, Mapping):
            raise CELError(f"has() on {_type(obj)}")
        return node[2] in obj
    if kind == "call":
        return _call(node[1], [evaluate(n, env) for n in node[2]])
    if kind == "!":
        return not _bool(evaluate(node[1], env), "!")
    if kind in ("&&", "||"):
        return _logical(kind, lambda: evaluate(node[1], env), lambda: evaluate(node[2], env))
    if kind == "cond":
        return evaluate(node[2] if _bool(evaluate(node[1], env), "?:") else node[3], env)
    left, right = evaluate(node[1], env), evaluate(node[2], env)
    if kind == "==":
        return _equal(left, right)
    if kind == "!=":
        return not _equal(left, right)
    if kind == "in":
        if isinstance(right, list):
            return any(_equal(left, x) for x in right)
        if isinstance(right, Mapping):
            return left in right
        raise CELError(f"no such overload: in {_type(right)}")
    if _type(left) != _type(right) or _type(left) not in ("int", "string"):
        raise CELError(f"no such overload: {_type(left)} {kind} {_type(right)}")
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[kind]


def run(text: str, env: Mapping[str, Any]) -> Any:
    """Parse and evaluate ``text`` over ``env``."""
    return evaluate(parse(text), env)
