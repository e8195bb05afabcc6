"""The one table of job options, and everything each entry point derives from it.

Every option a user can give a job (``workers``, ``timeout``, ``image``, ...) is one
:class:`JobOption` row in :data:`JOB_OPTIONS`: its name, type, default, help, flag
spelling, the :class:`~alchemist.job.spec.Resources` field it fills (if any) and the entry
points that offer it. From this table come the magic's flags and the CLI's ``submit``
flags (:func:`add_arguments`), :func:`alchemist.client.make_spec`'s keywords
(:func:`spec_from_options`), the REST submit schema (:func:`check_body_types`) and the
``job_options`` list of ``GET /alchemist/api/v1`` that the panel builds its form from
(:func:`describe_options`). Adding an option is one row here plus its use in the runtime;
``tests/core/test_job_options.py`` fails when an entry point and the table disagree.

The text forms of keyed values (``--env K=V``, ``--algorithm-option K=V``) are read here
too (:func:`parse_kv`, :func:`coerce`), so the magic and the CLI read them alike (the
panel's ``parseAlgorithmOptions`` in ``extensions/lab/src/model.ts`` follows :func:`coerce`).

This module imports no torch (and no IPython), so the CLI and the server load it cheaply.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from alchemist.errors import SpecError
from alchemist.job.algorithms import ALGORITHMS
from alchemist.job.algorithms import flag_help as algorithm_option_help
from alchemist.job.spec import NUMBER_LIMITS, JobSpec, Resources, number_problem

#: The entry points an option can be offered by. ``rest`` covers the panel too: the
#: panel's form is built from what the REST API lists.
ENTRY_POINTS = ("magic", "cli", "rest", "python")
_EVERYWHERE = frozenset(ENTRY_POINTS)

#: Option types: how a value is written on the command line and in JSON.
#:
#: - ``int``, ``float``, ``str``: one value (JSON: a number or a string);
#: - ``kv``: ``KEY=VALUE`` pairs, a repeatable flag (JSON: an object of strings);
#: - ``kv_typed``: like ``kv``, with numbers and booleans read as such (:func:`coerce`);
#: - ``names``: a comma-separated list (Python names, file patterns; JSON: a list of strings);
#: - ``bool``: a switch, off by default: a flag without a value (JSON: ``true``/``false``; the
#:   panel, which lists it with the choices ``true``/``false``, may send that text).
TYPES = ("int", "float", "str", "kv", "kv_typed", "names", "bool")

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "kv": (dict,),
    "kv_typed": (dict,),
    "names": (list,),
    "bool": (bool,),
}
_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    dict: "an object",
    list: "a list",
    bool: "true or false",
}
#: The text forms of a ``bool`` option's values (the panel's choices).
_BOOL_TEXT = {"true": True, "false": False}


@dataclass(frozen=True)
class JobOption:
    """One job option.

    Attributes:
        name: the keyword (``make_spec``, REST body, panel field); also the
            :class:`~alchemist.job.spec.JobSpec` field it fills unless ``resource`` is set.
        type: one of :data:`TYPES`.
        default: the value when not given (None: not set, so the spec's own default,
            or for ``backend`` ``$ALCHEMIST_BACKEND``, see :func:`alchemist.client.make_spec`).
        help: one line for ``--help`` and the panel's tooltip.
        flags: the command-line spelling, e.g. ``("-n", "--workers")``.
        resource: the :class:`~alchemist.job.spec.Resources` field it fills, if any.
        entry_points: where it is offered (a subset of :data:`ENTRY_POINTS`).
        label: the panel's label for the field.
        minimum: the smallest valid number, for the panel's input and the REST schema
            (the spec checks it: :data:`~alchemist.job.spec.NUMBER_LIMITS`).
        maximum: the largest valid number, likewise.
        choices: the valid values, where the list is fixed (shown in help and the panel).
    """

    name: str
    type: str
    default: Any
    help: str
    flags: tuple[str, ...]
    label: str
    resource: str | None = None
    entry_points: frozenset[str] = _EVERYWHERE
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    @property
    def metavar(self) -> str | None:
        return {"kv": "K=V", "kv_typed": "K=V", "names": "a,b"}.get(self.type)


def _spec_default(name: str, resource: bool = False) -> Any:
    """The default of :class:`JobSpec`'s (``resource``: :class:`Resources`') field
    ``name``: the one place a default is written, read here for help texts, the REST
    schema and the panel's form."""
    cls: Any = Resources if resource else JobSpec
    return cls.__dataclass_fields__[name].default


#: Every job option, in the order help texts and the panel's form show them.
JOB_OPTIONS: tuple[JobOption, ...] = (
    JobOption(
        name="workers",
        type="int",
        default=_spec_default("workers"),
        help="number of workers",
        flags=("-n", "--workers"),
        label="Workers",
        minimum=NUMBER_LIMITS["workers"][0],
        maximum=NUMBER_LIMITS["workers"][1],
    ),
    JobOption(
        name="gpus_per_worker",
        type="int",
        default=_spec_default("gpus", resource=True),
        help="GPUs per worker (0: CPU); one process per GPU",
        flags=("--gpus-per-worker",),
        label="GPUs / worker",
        resource="gpus",
        minimum=NUMBER_LIMITS["gpus_per_worker"][0],
        maximum=NUMBER_LIMITS["gpus_per_worker"][1],
    ),
    JobOption(
        name="algorithm",
        type="str",
        default=_spec_default("algorithm"),
        help="distributed algorithm",
        flags=("--algorithm",),
        label="Algorithm",
        choices=ALGORITHMS,
    ),
    JobOption(
        name="algorithm_options",
        type="kv_typed",
        default=None,
        help=algorithm_option_help(),
        flags=("--algorithm-option",),
        label="Algorithm options",
    ),
    JobOption(
        name="backend",
        type="str",
        default=None,
        help="backend name: local or kubernetes (default: $ALCHEMIST_BACKEND, else local)",
        flags=("--backend",),
        label="Backend",
    ),
    JobOption(
        name="name",
        type="str",
        default=None,
        help="a name for the job (default: job or the file's)",
        flags=("--name",),
        label="Name",
    ),
    JobOption(
        name="max_restarts",
        type="int",
        default=_spec_default("max_restarts"),
        help="restarts of the worker group after a failure",
        flags=("--max-restarts",),
        label="Max restarts",
        minimum=NUMBER_LIMITS["max_restarts"][0],
        maximum=NUMBER_LIMITS["max_restarts"][1],
    ),
    JobOption(
        name="timeout",
        type="float",
        default=None,
        help="stop the job after this many seconds (default: no limit)",
        flags=("--timeout",),
        label="Timeout (s)",
        minimum=NUMBER_LIMITS["timeout"][0],
        maximum=NUMBER_LIMITS["timeout"][1],
    ),
    JobOption(
        name="global_batch",
        type="int",
        default=None,
        help="global batch over all ranks (a multiple of the world size)",
        flags=("--global-batch",),
        label="Global batch",
        minimum=NUMBER_LIMITS["global_batch"][0],
        maximum=NUMBER_LIMITS["global_batch"][1],
    ),
    JobOption(
        name="env",
        type="kv",
        default=None,
        help="environment variable of every worker (repeatable)",
        flags=("--env",),
        label="Environment",
    ),
    JobOption(
        name="image",
        type="str",
        default=None,
        help="container image (kubernetes backend; default: the backend's)",
        flags=("--image",),
        label="Image",
    ),
    JobOption(
        name="cpu",
        type="str",
        default=None,
        help="CPU per worker, e.g. 4 (kubernetes backend)",
        flags=("--cpu",),
        label="CPU / worker",
        resource="cpu",
    ),
    JobOption(
        name="memory",
        type="str",
        default=None,
        help="memory per worker, e.g. 16Gi (kubernetes backend)",
        flags=("--memory",),
        label="Memory / worker",
        resource="memory",
    ),
    JobOption(
        name="include",
        type="names",
        default=None,
        help="only these files of the notebook's folder travel to Kubernetes pods"
        " (.gitignore patterns, e.g. data/*.csv; default: all but .alchemistignore's)",
        flags=("--include",),
        label="Ship only",
    ),
    JobOption(
        name="exclude",
        type="names",
        default=None,
        help="files of the notebook's folder that never travel to Kubernetes pods"
        " (.gitignore patterns, e.g. checkpoints/)",
        flags=("--exclude",),
        label="Never ship",
    ),
    JobOption(
        name="outputs",
        type="names",
        default=None,
        help="copy these variables back from rank 0 after success",
        flags=("-o", "--outputs"),
        label="Outputs",
        # A script run by the CLI or the REST API has no caller to copy values back to.
        entry_points=frozenset({"magic", "python"}),
    ),
    JobOption(
        name="debug",
        type="bool",
        default=_spec_default("debug"),
        help="run with TORCH_DISTRIBUTED_DEBUG=DETAIL: ranks that call different"
        " collectives fail at once, naming both (slower collectives)",
        flags=("--debug",),
        label="Debug collectives",
    ),
    JobOption(
        name="no_warm",
        type="bool",
        default=_spec_default("no_warm"),
        help="start the ranks as fresh processes instead of forking them from your warm"
        " pool (local backend)",
        flags=("--no-warm",),
        label="Cold start",
    ),
)

_BY_NAME = {opt.name: opt for opt in JOB_OPTIONS}


def options_for(entry_point: str, only: Collection[str] | None = None) -> tuple[JobOption, ...]:
    """The options ``entry_point`` (one of :data:`ENTRY_POINTS`) offers, in table order
    (those named in ``only``, if given: a session's start takes the options that size
    its ranks)."""
    if entry_point not in ENTRY_POINTS:
        raise ValueError(f"unknown entry point {entry_point!r}")
    return tuple(
        opt
        for opt in JOB_OPTIONS
        if entry_point in opt.entry_points and (only is None or opt.name in only)
    )


# -- text forms --------------------------------------------------------------------------


def coerce(value: str) -> Any:
    """A typed value from text: ``true``/``false`` → bool, numbers → int or float, else str.

    This is how the magic, the CLI and the panel read an algorithm option typed as text.
    """
    low = value.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def parse_kv(items: Iterable[str] | None, flag: str) -> dict[str, str]:
    """``["K=V", ...]`` as a dict (the value may contain ``=``).

    Raises:
        SpecError: an item has no ``=`` or no key; the message names ``flag``.
    """
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(f"{flag} expects KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def parse_names(text: str | None) -> list[str]:
    """``"a, b"`` as ``["a", "b"]`` (empty parts dropped)."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


# -- command lines (the magic's and the CLI's flags) -------------------------------------


def _help(opt: JobOption) -> str:
    text = opt.help
    if opt.choices:
        text += f": one of {', '.join(opt.choices)}"
    if opt.default is not None:
        text += f" (default {opt.default})"
    # argparse formats help with %: a literal percent sign must be doubled.
    return text.replace("%", "%%")


def argument_specs(
    entry_point: str, only: Collection[str] | None = None
) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """``(flags, add_argument keywords)`` for every option ``entry_point`` offers (those
    named in ``only``, if given; see :func:`options_for`).

    ``argparse`` and IPython's ``magic_arguments.argument`` take the same arguments, so
    the magic and the CLI build their flags from this one list (as ipyparallel's magics
    share their ``exec_args``).
    """
    specs: list[tuple[tuple[str, ...], dict[str, Any]]] = []
    for opt in options_for(entry_point, only):
        kwargs: dict[str, Any] = {"dest": opt.name, "help": _help(opt)}
        if opt.type in ("kv", "kv_typed"):
            kwargs.update(action="append", metavar=opt.metavar, default=None)
        elif opt.type == "names":
            kwargs.update(metavar=opt.metavar, default=None)
        elif opt.type == "bool":
            kwargs.update(action="store_true", default=opt.default)
        else:
            kwargs.update(type={"int": int, "float": float, "str": str}[opt.type])
            kwargs["default"] = opt.default
        specs.append((opt.flags, kwargs))
    return specs


def add_arguments(
    parser: argparse.ArgumentParser, entry_point: str, only: Collection[str] | None = None
) -> None:
    """Add ``entry_point``'s job option flags to ``parser`` (those named in ``only``)."""
    for flags, kwargs in argument_specs(entry_point, only):
        parser.add_argument(*flags, **kwargs)


def options_from_args(
    args: argparse.Namespace | Any, entry_point: str, only: Collection[str] | None = None
) -> dict[str, Any]:
    """The keyword arguments of :func:`alchemist.client.submit` from parsed flags (of the
    options named in ``only``, if given).

    Raises:
        SpecError: a ``K=V`` flag without ``=`` (naming the flag).
    """
    out: dict[str, Any] = {}
    for opt in options_for(entry_point, only):
        value = getattr(args, opt.name)
        flag = opt.flags[-1]
        if opt.type == "kv":
            value = parse_kv(value, flag)
        elif opt.type == "kv_typed":
            value = {k: coerce(v) for k, v in parse_kv(value, flag).items()}
        elif opt.type == "names":
            value = parse_names(value)
        out[opt.name] = value
    return out


# -- the spec --------------------------------------------------------------------------


def defaults() -> dict[str, Any]:
    """Every option's default, as :func:`spec_from_options` reads it."""
    return {opt.name: opt.default for opt in JOB_OPTIONS}


def spec_from_options(
    options: Mapping[str, Any], entry: str = "cell", fallback: Callable[[str], Any] | None = None
) -> Any:
    """A validated :class:`~alchemist.job.spec.JobSpec` from option values (the others default).

    Args:
        options: values by option name (a subset of :data:`JOB_OPTIONS`).
        entry: what the workers run (``cell``, ``script`` or ``function``).
        fallback: the value of an option left None, by name (e.g. ``backend`` from the
            environment); None keeps the spec's own default.

    Raises:
        SpecError: an unknown option (naming the valid ones) or an invalid value.
    """
    unknown = sorted(set(options) - set(_BY_NAME))
    if unknown:
        raise SpecError(
            f"unknown job option(s) {', '.join(unknown)}; valid options: {', '.join(_BY_NAME)}"
        )
    fields: dict[str, Any] = {}
    resources: dict[str, Any] = {}
    for opt in JOB_OPTIONS:
        value = options.get(opt.name, opt.default)
        if value is None and fallback is not None:
            value = fallback(opt.name)
        if value is None:
            continue  # the spec's own default (an empty mapping, "job", ...)
        if opt.type in ("kv", "kv_typed"):
            value = dict(value)
        elif opt.type == "names":
            value = [value] if isinstance(value, str) else list(value)
        elif opt.type == "bool" and isinstance(value, str) and value.lower() in _BOOL_TEXT:
            value = _BOOL_TEXT[value.lower()]  # the panel's choice, as text
        (resources if opt.resource else fields)[opt.resource or opt.name] = value
    return JobSpec(resources=Resources(**resources), entry=entry, **fields).validate()


# -- JSON (the REST API and the panel) ---------------------------------------------------


def check_body_types(data: Mapping[str, Any]) -> tuple[str, str] | None:
    """Check the JSON types of a REST submit body's job options, and the range of the
    numeric ones (:func:`~alchemist.job.spec.number_problem`, the spec's own check, so
    the reply can name the field: JSON's ``1e400`` reads as infinity).

    ``null`` stands for "not given" where the default is None. Keys that are not REST
    options are left to the caller (it knows its own, such as ``path``).

    Returns:
        None when every value has its option's type (and range), else ``(option name,
        one line)`` for the first that has not.
    """
    for opt in options_for("rest"):
        if opt.name not in data:
            continue
        value = data[opt.name]
        if value is None and opt.default is None:
            continue
        types = _JSON_TYPES[opt.type]
        if opt.type == "bool":
            if not isinstance(value, bool) and str(value).lower() not in _BOOL_TEXT:
                return opt.name, f"{opt.name} must be true or false, got {json.dumps(value)}"
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            want = " or ".join(_TYPE_NAMES[t] for t in types)
            return opt.name, f"{opt.name} must be {want}, got {json.dumps(value)}"
        if isinstance(value, list) and not all(isinstance(item, str) for item in value):
            return opt.name, f"{opt.name} must be a list of strings, got {json.dumps(value)}"
        if opt.name in NUMBER_LIMITS:
            problem = number_problem(opt.name, value)
            if problem is not None:
                return opt.name, problem
        if opt.type == "kv" and isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(item, str):
                    return opt.name, (
                        f"{opt.name}[{key!r}] must be a string (environment values are text)"
                    )
    return None


def describe_options(entry_point: str = "rest") -> list[dict[str, Any]]:
    """``entry_point``'s options as JSON (``GET /alchemist/api/v1`` ``job_options``)."""
    return [
        {
            "name": opt.name,
            "type": opt.type,
            "default": opt.default,
            "help": opt.help,
            "label": opt.label,
            "flags": list(opt.flags),
            "resource": opt.resource,
            "minimum": opt.minimum,
            "maximum": opt.maximum,
            # a switch is offered as a choice of two (the panel has no other bool field)
            "choices": list(_BOOL_TEXT) if opt.type == "bool" else list(opt.choices),
        }
        for opt in options_for(entry_point)
    ]


__all__ = [
    "ENTRY_POINTS",
    "JOB_OPTIONS",
    "TYPES",
    "JobOption",
    "add_arguments",
    "argument_specs",
    "check_body_types",
    "coerce",
    "defaults",
    "describe_options",
    "options_for",
    "options_from_args",
    "parse_kv",
    "parse_names",
    "spec_from_options",
]
