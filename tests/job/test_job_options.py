"""Every entry point offers exactly the job options of the one table (alchemist.job.options).

The magic's parser, the CLI's ``submit`` parser, ``make_spec``'s keywords and the REST
submit schema are each compared with :data:`alchemist.job.options.JOB_OPTIONS`: the same
names for that entry point and the same defaults. (The REST root's ``job_options`` is
checked against a real Jupyter server in ``tests/server/test_handlers.py``.)
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from IPython.core.magic_arguments import magic_arguments, parse_argstring

from alchemist import cli
from alchemist.client import make_spec
from alchemist.errors import SpecError
from alchemist.job import options
from alchemist.job.algorithms import OPTIONS as ALGORITHM_OPTIONS
from alchemist.job.options import JOB_OPTIONS, JobOption, options_for, options_from_args
from alchemist.job.spec import ALGORITHMS, JobSpec, Resources
from alchemist.magics import AlchemistMagics, _job_option_arguments
from alchemist.server.handlers import RouteError, _check_submit_body

#: Flags of the magic and the CLI that are about watching a job, not the job itself.
MAGIC_ONLY = {"help", "detach", "dry_run", "max_output_lines", "no_widget"}
CLI_ONLY = {"help", "file", "detach", "dry_run"}


def names(entry_point: str) -> set[str]:
    return {opt.name for opt in options_for(entry_point)}


def dests(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {action.dest: action for action in parser._actions}


def submit_parser() -> argparse.ArgumentParser:
    subparsers = next(
        a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    parser: argparse.ArgumentParser = subparsers.choices["submit"]
    return parser


def magic_parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = AlchemistMagics.alchemist_distributed.parser  # type: ignore[attr-defined]
    return parser


def test_the_table_fills_every_spec_field_and_each_once() -> None:
    filled = [opt.name for opt in JOB_OPTIONS if not opt.resource]
    resources = [opt.resource for opt in JOB_OPTIONS if opt.resource]
    spec_fields = {f.name for f in dataclasses.fields(JobSpec)} - {"resources", "entry"}
    assert sorted(filled) == sorted(spec_fields)
    assert sorted(resources) == sorted(f.name for f in dataclasses.fields(Resources))
    assert len({opt.name for opt in JOB_OPTIONS}) == len(JOB_OPTIONS)
    flags = [flag for opt in JOB_OPTIONS for flag in opt.flags]
    assert len(set(flags)) == len(flags)
    # the table's defaults are the spec's own
    spec, resource_defaults = JobSpec(), Resources()
    for opt in JOB_OPTIONS:
        if opt.default is not None:
            owner = resource_defaults if opt.resource else spec
            assert getattr(owner, opt.resource or opt.name) == opt.default, opt.name


def test_one_algorithm_list() -> None:
    assert tuple(ALGORITHM_OPTIONS) == ALGORITHMS
    (algorithm,) = (opt for opt in JOB_OPTIONS if opt.name == "algorithm")
    assert algorithm.choices == ALGORITHMS


@pytest.mark.parametrize(
    ("entry_point", "parser", "own"),
    [("magic", magic_parser, MAGIC_ONLY), ("cli", submit_parser, CLI_ONLY)],
)
def test_command_line_flags_are_the_table(entry_point: str, parser: Any, own: set[str]) -> None:
    p = parser()
    actions = dests(p)
    assert set(actions) - own == names(entry_point)
    for opt in options_for(entry_point):
        action = actions[opt.name]
        assert tuple(action.option_strings) == opt.flags, opt.name
        if opt.type in ("int", "float", "str"):
            assert action.default == opt.default, opt.name
    # No flag given: exactly the spec that make_spec builds from nothing.
    parsed = p.parse_args(["x.py"] if entry_point == "cli" else [])
    assert make_spec(**options_from_args(parsed, entry_point)) == make_spec()


def test_magic_flags_reach_the_spec() -> None:
    args = parse_argstring(
        AlchemistMagics.alchemist_distributed,
        "-n 3 --gpus-per-worker 1 --algorithm bmuf --algorithm-option block_size=4"
        " --algorithm-option nesterov=false --name r1 --max-restarts 2 --timeout 9.5"
        " --global-batch 6 --env A=x=y --image img:1 --cpu 2 --memory 1Gi -o a,b --debug",
    )
    spec = make_spec(**options_from_args(args, "magic"))
    assert spec.workers == 3 and spec.resources == Resources(gpus=1, cpu="2", memory="1Gi")
    assert spec.algorithm_options == {"block_size": 4, "nesterov": False}
    assert (spec.name, spec.max_restarts, spec.timeout, spec.global_batch) == ("r1", 2, 9.5, 6)
    assert spec.env == {"A": "x=y"} and spec.image == "img:1" and spec.outputs == ["a", "b"]
    assert spec.debug is True


def test_make_spec_takes_exactly_the_python_options() -> None:
    for opt in options_for("python"):
        assert make_spec(**{opt.name: opt.default}) == make_spec(), opt.name
    with pytest.raises(SpecError) as info:
        make_spec(colour="red")
    listed = str(info.value).split("valid options: ")[1].split(", ")
    assert set(listed) == names("python") == {opt.name for opt in JOB_OPTIONS}


def test_rest_schema_is_the_table(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    with pytest.raises(RouteError) as info:
        _check_submit_body({"colour": "red"}, tmp_path)
    allowed = info.value.message.split("allowed: ")[1].split(", ")
    assert set(allowed) == names("rest") | {"path"}
    for opt in options_for("rest"):
        wrong: Any = 1.5 if opt.type in ("str", "kv", "kv_typed", "names", "int") else "x"
        with pytest.raises(RouteError) as info:
            _check_submit_body({"path": "train.py", opt.name: wrong}, tmp_path)
        assert info.value.field == opt.name and "must be" in info.value.message
    # every option's default is a valid value of its own (JSON null where it is None)
    body = {"path": "train.py", **{o.name: o.default for o in options_for("rest")}}
    _, given = _check_submit_body(body, tmp_path)
    assert make_spec(**given) == make_spec()


def test_every_row_shows_in_each_entry_points_help() -> None:
    magic_help = magic_parser().format_help()
    cli_help = submit_parser().format_help()
    rest = {o["name"]: o for o in options.describe_options("rest")}
    for opt in JOB_OPTIONS:
        for flag in opt.flags:
            shown = re.compile(rf"(?<![\w-]){re.escape(flag)}(?![\w-])")
            assert bool(shown.search(magic_help)) == ("magic" in opt.entry_points), flag
            assert bool(shown.search(cli_help)) == ("cli" in opt.entry_points), flag
        assert (opt.name in rest) == ("rest" in opt.entry_points), opt.name
        if opt.name in rest:
            assert rest[opt.name]["default"] == opt.default
            assert rest[opt.name]["help"] == opt.help


def test_a_new_row_is_offered_by_every_entry_point(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    new = JobOption("shm_size", "str", None, "shared memory per worker", ("--shm-size",), "Shm")
    monkeypatch.setattr(options, "JOB_OPTIONS", (*JOB_OPTIONS, new))
    assert "--shm-size" in submit_parser().format_help()

    def magic(line: str) -> None:
        """A stand-in cell magic."""

    fresh = magic_arguments()(_job_option_arguments(magic))
    assert "--shm-size" in fresh.parser.format_help()  # type: ignore[attr-defined]
    assert "shm_size" in {o["name"] for o in options.describe_options("rest")}
    (tmp_path / "train.py").write_text("print('hi')\n")
    _, given = _check_submit_body({"path": "train.py", "shm_size": "1Gi"}, tmp_path)
    assert given["shm_size"] == "1Gi"
    with pytest.raises(RouteError) as info:
        _check_submit_body({"path": "train.py", "shm_size": 1}, tmp_path)
    assert info.value.field == "shm_size" and "must be a string" in info.value.message


def test_key_value_flags_are_read_in_one_place() -> None:
    assert options.parse_kv(["A=1", "B=x=y"], "--env") == {"A": "1", "B": "x=y"}
    with pytest.raises(SpecError, match="--env expects KEY=VALUE, got 'A'"):
        options.parse_kv(["A"], "--env")
    assert [options.coerce(v) for v in ("4", "0.5", "True", "fp16")] == [4, 0.5, True, "fp16"]


def test_cli_image_cpu_and_memory_reach_the_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Kubernetes backend's dry run (no API call) shows the pods these flags ask for."""
    monkeypatch.setenv("ALCHEMIST_K8S_PVC", "claim")
    monkeypatch.setenv("ALCHEMIST_K8S_IMAGE", "alchemist-default:1")
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    argv = ["submit", str(script), "--backend", "kubernetes", "--dry-run"]
    flags = ["--image", "alchemist-train:7", "--cpu", "3", "--memory", "5Gi"]
    assert cli.main([*argv, *flags]) == 0
    out = capsys.readouterr().out
    assert "image: alchemist-train:7" in out
    assert "cpu: '3'" in out and "memory: 5Gi" in out
    assert cli.main(argv) == 0
    plain = capsys.readouterr().out
    assert "image: alchemist-default:1" in plain
    assert "alchemist-train:7" not in plain and "5Gi" not in plain
    # a K=V flag without '=' is one line and exit status 2, as every user mistake
    assert cli.main([*argv, "--env", "NOVALUE"]) == 2
    assert capsys.readouterr().err == "alchemist: error: --env expects KEY=VALUE, got 'NOVALUE'\n"


def test_the_table_imports_no_torch_or_ipython() -> None:
    """The CLI and the server read the table; it must stay cheap to import."""
    import subprocess
    import sys

    code = (
        "import sys, alchemist.job.options; print(sorted({'torch', 'IPython'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_numeric_bounds_are_the_specs_and_reach_the_panel_and_the_schema() -> None:
    """One range per numeric option: the spec checks it, the panel's form and the REST
    schema show it (so a form refuses what the spec would)."""
    from alchemist.job.spec import NUMBER_LIMITS
    from alchemist.server.openapi import document

    numeric = {opt.name: opt for opt in JOB_OPTIONS if opt.type in ("int", "float")}
    assert set(numeric) == set(NUMBER_LIMITS)
    rest = {o["name"]: o for o in options.describe_options("rest")}
    submit = document("/")["components"]["schemas"]["Submit"]["properties"]
    for name, (low, high) in NUMBER_LIMITS.items():
        assert (numeric[name].minimum, numeric[name].maximum) == (low, high), name
        assert (rest[name]["minimum"], rest[name]["maximum"]) == (low, high), name
        assert (submit[name]["minimum"], submit[name]["maximum"]) == (low, high), name
        one_rank = {"workers": 1} if name == "global_batch" else {}
        assert make_spec(**{**one_rank, name: low}) and make_spec(**{**one_rank, name: high})
        with pytest.raises(SpecError, match=f"{name} must be at most {high}"):
            make_spec(**{**one_rank, name: high + 1})
