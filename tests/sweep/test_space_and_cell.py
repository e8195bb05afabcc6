"""What a user writes to sweep: ``--param`` specs, the cell's own assignments, the checks.

No job runs here: these are the one-line errors a user gets before anything starts, and
the per-trial cell the workers run.
"""

from __future__ import annotations

import pytest

from alchemist.errors import SpecError
from alchemist.sweep.cell import check_swept_names, with_values
from alchemist.sweep.space import MAX_TRIALS, grid_size, parse_param, parse_params
from alchemist.sweep.spec import SweepSpec

CELL = """import alchemist
lr = 0.1
batch_size: int = 32
layers = (
    64,
    64,
)
for step in range(3):
    alchemist.log(step, val_acc=lr * step)
"""


@pytest.mark.parametrize(
    ("text", "kind", "values"),
    [
        ("lr=0.1,0.01", "choice", (0.1, 0.01)),
        ("act=relu,gelu", "choice", ("relu", "gelu")),
        ("act=['relu', 'gelu']", "choice", ("relu", "gelu")),
        ("bs=range(16,65,16)", "choice", (16, 32, 48, 64)),
        ("flag=True,False", "choice", (True, False)),
    ],
)
def test_lists_and_ranges_make_a_grid(text: str, kind: str, values: tuple) -> None:
    p = parse_param(text)
    assert (p.kind, p.choices) == (kind, values)
    assert p.is_grid


def test_draws_are_not_a_grid_and_become_optuna_distributions() -> None:
    lr = parse_param("lr=loguniform(1e-4,1e-1)")
    width = parse_param("width=int(32,512)")
    assert (lr.kind, lr.low, lr.high) == ("loguniform", 1e-4, 1e-1)
    assert grid_size([lr, width]) is None
    assert lr.distribution().log and width.distribution().high == 512
    assert grid_size(parse_params(["a=1,2,3", "b=range(4)"])) == 12


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("lr", "write NAME=VALUES"),
        ("lr=", "no values"),
        ("lr=loguniform(0,1)", "above 0"),
        ("lr=uniform(1,1)", "low < high"),
        ("lr=uniform(1)", "two bounds"),
        ("lr=int(1.5,3)", "whole-number bounds"),
        ("lr=range(0,100000)", "draw from it instead"),
        ("lr=1,1", "listed twice"),
        ("lr=open('x')", "cannot read"),
        ("2lr=1", "write NAME=VALUES"),
    ],
)
def test_bad_specs_are_one_line_naming_the_fix(text: str, says: str) -> None:
    with pytest.raises(SpecError, match=says) as e:
        parse_param(text)
    assert "\n" not in str(e.value)


def test_a_name_given_twice_is_refused() -> None:
    with pytest.raises(SpecError, match="given twice"):
        parse_params(["lr=1,2", "lr=3,4"])


def test_each_trial_changes_only_the_swept_assignments_and_keeps_every_line() -> None:
    out = with_values(CELL, {"lr": 0.003, "batch_size": 64, "layers": "wide"})
    lines, before = out.splitlines(), CELL.splitlines()
    assert len(lines) == len(before)
    assert lines[1] == "lr = 0.003"
    assert lines[2] == "batch_size: int = 64"
    assert lines[3].startswith("layers = ('wide'") and lines[6] == ")"
    assert lines[7:] == before[7:]  # the loop is untouched, on the same lines
    ns: dict = {}
    exec(
        compile(
            out.replace(
                "import alchemist",
                "from types import SimpleNamespace as N; alchemist = N(log=lambda step, **v: None)",
            ),
            "<cell>",
            "exec",
        ),
        ns,
    )
    assert (ns["lr"], ns["batch_size"], ns["layers"]) == (0.003, 64, "wide")


def test_a_swept_name_the_cell_does_not_set_once_is_refused() -> None:
    with pytest.raises(SpecError, match=r"never sets momentum.*sets: batch_size, layers, lr"):
        check_swept_names(CELL, ["momentum"])
    with pytest.raises(SpecError, match=r"sets lr 2 times \(lines 1, 2\)"):
        check_swept_names("lr = 1\nlr = 2\n", ["lr"])
    with pytest.raises(SpecError, match="never sets lr"):
        check_swept_names("def f():\n    lr = 1\n", ["lr"])


def test_defaults_grid_for_lists_tpe_for_draws_and_bounds() -> None:
    grid = SweepSpec.make("s", parse_params(["a=1,2", "b=3,4,5"]), "acc")
    assert (grid.sampler, grid.trials) == ("grid", 6)
    drawn = SweepSpec.make("s", parse_params(["lr=loguniform(1e-3,1)"]), "acc", trials=7)
    assert (drawn.sampler, drawn.trials) == ("tpe", 7)
    assert SweepSpec.make("s", parse_params(["a=1,2"]), "acc", parallel=5).parallel == 2
    with pytest.raises(SpecError, match=r"1,000,000 combinations .*--trials N"):
        SweepSpec.make("s", parse_params(["a=range(1000)", "b=range(1000)"]), "acc")
    assert MAX_TRIALS < 1_000_000
    with pytest.raises(SpecError, match="is drawn: use --sampler random or tpe"):
        SweepSpec.make("s", parse_params(["lr=uniform(0,1)"]), "acc", sampler="grid")
    for bad, says in (
        ({"mode": "up"}, "--mode must be max or min"),
        ({"pruner": "asha"}, "--pruner must be one of"),
        ({"parallel": 0}, "--parallel must be"),
        ({"trials": 0}, "--trials must be"),
    ):
        with pytest.raises(SpecError, match=says):
            SweepSpec.make("s", parse_params(["a=1,2"]), "acc", **bad)
    spec = SweepSpec.make("s", parse_params(["a=1,2"]), "acc", seed=3)
    assert SweepSpec.from_dict({**spec.to_dict(), "created": 1.0}) == spec
