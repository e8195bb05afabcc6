"""Every algorithm's options: default, type, valid values, and checking them.

This module imports no torch. A spec's ``algorithm_options`` are checked with
:func:`check` when the job is submitted (``JobSpec.validate``: the magics, the Python
API, the CLI, the REST API and the panel), and each rank checks with the same function
when it wraps the model, so a misspelt or out-of-range option is one line at submit
instead of a failed job, and the two checks cannot drift apart.

The defaults are the papers' recommended settings. Two are derived from the world size
N when not given: BMUF's block momentum 1 − 1/N (Chen & Huo 2016) and EASGD's moving
rate 0.9/N (Zhang et al. 2015, β = 0.9).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from alchemist.errors import SpecError


@dataclass(frozen=True)
class Option:
    """One option: its default, its type, and what values it accepts.

    ``kind`` is ``int``, ``float`` (an int is accepted too), ``bool`` or ``str``; numbers
    must lie in ``[low, high]``, strings in ``choices``. A derived option has default
    None and its value follows from the world size N: ``derive(N)``, which ``derived``
    writes out for people.
    """

    default: Any
    kind: type
    help: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    derived: str = ""
    derive: Callable[[int], float] | None = None


#: EASGD's β = p·α (Zhang et al. 2015), kept constant as the number of workers p changes.
EASGD_BETA = 0.9

_TIMEOUTS = {
    "finish_timeout": Option(
        600.0, float, "seconds the server waits for the other workers at the end", 0, 1e7
    ),
    "request_timeout": Option(300.0, float, "seconds one request may take", 0.001, 1e7),
}

#: Every option of every algorithm, in the order they are documented.
OPTIONS: dict[str, dict[str, Option]] = {
    "sync": {
        "bucket_cap_mb": Option(25.0, float, "DDP all-reduce bucket size in MiB", 0.001, 1e6),
        "find_unused_parameters": Option(
            False, bool, "allow parameters that get no gradient in a step"
        ),
        "gradient_as_bucket_view": Option(
            False, bool, "gradients are views into the buckets (saves one copy)"
        ),
        "static_graph": Option(False, bool, "the graph is the same every step"),
    },
    "async": {
        "log_every": Option(10, int, "log staleness every this many steps (0: never)", 0, 1e9),
        **_TIMEOUTS,
    },
    "bmuf": {
        "block_size": Option(16, int, "local steps per block", 1, 1e9),
        "block_momentum": Option(
            None,
            float,
            "block momentum",
            0.0,
            0.999999,
            derived="1 - 1/N",
            derive=lambda n: 1.0 - 1.0 / n,
        ),
        "block_lr": Option(1.0, float, "block learning rate", 1e-12, 1e6),
        "nesterov": Option(True, bool, "Nesterov block momentum"),
        "local_momentum": Option(
            "reset",
            str,
            "the workers' optimizer momentum at each block start: reset to zero (CNTK) or keep",
            choices=("reset", "keep"),
        ),
    },
    "easgd": {
        "moving_rate": Option(
            None,
            float,
            "elastic moving rate alpha",
            0.0,
            1.0,
            derived="0.9/N",
            derive=lambda n: EASGD_BETA / n,
        ),
        "communication_period": Option(10, int, "local steps between exchanges", 1, 1e9),
        "follow_lr": Option(
            True,
            bool,
            "scale alpha by the learning rate over its base (alpha = eta*rho), at most alpha",
        ),
        **_TIMEOUTS,
    },
    "horovod": {
        "backward_passes_per_step": Option(1, int, "backward passes accumulated per step", 1, 1e6),
        "compression": Option("none", str, "gradient compression", choices=("none", "fp16")),
        "op": Option("average", str, "reduction", choices=("average", "sum", "adasum")),
        "gradient_predivide_factor": Option(
            1.0, float, "divide gradients by this before the sum", 1e-9, 1e9
        ),
    },
}


@dataclass(frozen=True)
class Algorithm:
    """Where an algorithm runs: its module and the launcher its ranks need.

    ``module`` is the module's name in :mod:`alchemist.runtime.algorithms` (which has
    ``wrap``); ``launcher`` is ``torchrun`` (the job's process group is made by the worker
    on torchrun's rendezvous) or ``horovodrun`` (Horovod's own gloo rendezvous; its
    ``wrap`` calls ``horovod.init()``, and the warm pool cannot fork its ranks).
    """

    module: str
    launcher: str = "torchrun"

    @property
    def own_launcher(self) -> bool:
        """Whether the ranks need a launcher other than torchrun (no warm start)."""
        return self.launcher != "torchrun"


#: Every algorithm: its module and its launcher, in the order of :data:`OPTIONS`.
CATALOGUE: dict[str, Algorithm] = {
    "sync": Algorithm("sync"),
    "async": Algorithm("async_ps"),
    "bmuf": Algorithm("bmuf"),
    "easgd": Algorithm("easgd"),
    "horovod": Algorithm("horovod", launcher="horovodrun"),
}
assert tuple(CATALOGUE) == tuple(OPTIONS), "an algorithm needs both its options and its entry"

#: Every algorithm a job may use, in the order they are documented (the one list: the
#: spec, the flags' help, the REST API and the panel take it from here).
ALGORITHMS: tuple[str, ...] = tuple(OPTIONS)


def needs_own_launcher(algorithm: str) -> bool:
    """True when ``algorithm``'s ranks start under their own launcher, not torchrun."""
    entry = CATALOGUE.get(algorithm)
    return entry is not None and entry.own_launcher


#: Every option of every algorithm and its default (None: derived from the world size).
ALGORITHM_DEFAULTS: dict[str, dict[str, Any]] = {
    name: {key: opt.default for key, opt in opts.items()} for name, opts in OPTIONS.items()
}


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _alternatives(choices: tuple[str, ...]) -> str:
    return (
        " or ".join(choices) if len(choices) < 3 else f"{', '.join(choices[:-1])} or {choices[-1]}"
    )


def _check_value(algorithm: str, key: str, opt: Option, value: Any) -> None:
    if opt.kind is bool:
        if not isinstance(value, bool):
            raise SpecError(f"{algorithm} option {key} must be true or false, got {value!r}")
        return
    if opt.kind is str:
        if value not in opt.choices:
            raise SpecError(
                f"{algorithm} option {key} must be {_alternatives(opt.choices)}, got {value!r}"
            )
        return
    assert opt.low is not None and opt.high is not None
    number = isinstance(value, int) if opt.kind is int else isinstance(value, (int, float))
    if isinstance(value, bool) or not number or not opt.low <= value <= opt.high:
        what = "an integer" if opt.kind is int else "a number"
        raise SpecError(
            f"{algorithm} option {key} must be {what} in"
            f" [{_number(opt.low)}, {_number(opt.high)}], got {value!r}"
        )


def check(
    algorithm: str, options: Mapping[str, Any], world_size: int | None = None
) -> dict[str, Any]:
    """``options`` merged over ``algorithm``'s defaults, every given value checked.

    With ``world_size``, derived options left unset (None) get their value from it.

    Raises:
        SpecError: an unknown algorithm or option (naming the valid ones), or a value of
            the wrong type or out of range, in one line.
    """
    if algorithm not in OPTIONS:
        raise SpecError(f"algorithm {algorithm!r} is unknown; choose one of {', '.join(OPTIONS)}")
    rules = OPTIONS[algorithm]
    unknown = sorted(set(options) - set(rules))
    if unknown:
        raise SpecError(
            f"unknown option(s) {', '.join(unknown)} for algorithm {algorithm!r};"
            f" valid options: {', '.join(sorted(rules))}"
        )
    merged = {**ALGORITHM_DEFAULTS[algorithm], **options}
    for key, opt in rules.items():
        value = merged[key]
        if value is None and opt.derive is not None:
            if world_size is not None:
                merged[key] = opt.derive(max(1, world_size))
            continue
        _check_value(algorithm, key, opt, value)
    return merged


def describe() -> str:
    """The options and their defaults, one algorithm per line (for ``--help``)."""
    return "\n".join(
        f"{name}: " + ", ".join(f"{key}={_default(opt)}" for key, opt in opts.items())
        for name, opts in OPTIONS.items()
    )


def flag_help() -> str:
    """The help of ``--algorithm-option`` (the magic's and the CLI's)."""
    return "algorithm parameter (repeatable); with their defaults: " + "; ".join(
        describe().splitlines()
    )


def catalogue() -> dict[str, list[dict[str, str]]]:
    """Every algorithm's options as JSON for the panel: name, default as text, meaning."""
    return {
        name: [
            {"name": key, "default": _default(opt), "help": opt.help} for key, opt in opts.items()
        ]
        for name, opts in OPTIONS.items()
    }


def _default(opt: Option) -> str:
    return opt.derived or _show(opt.default)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return _number(value) if isinstance(value, (int, float)) else str(value)


__all__ = [
    "ALGORITHMS",
    "ALGORITHM_DEFAULTS",
    "OPTIONS",
    "Option",
    "catalogue",
    "check",
    "describe",
    "flag_help",
]
