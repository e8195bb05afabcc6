"""The algorithm registry, options, world size 1, and Horovod's absence (no processes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from algo_harness import RankCtx

from alchemist.backends.horovod_launch import horovodrun_args
from alchemist.errors import BackendError, SpecError
from alchemist.job.jobdir import JobDir
from alchemist.job.spec import ALGORITHMS, JobSpec
from alchemist.runtime import algorithms

ALONE = RankCtx(rank=0, world_size=1, local_rank=0)


def test_every_spec_algorithm_is_registered_with_defaults() -> None:
    assert set(algorithms.names()) == set(ALGORITHMS)
    for name in ALGORITHMS:
        module = algorithms.get(name)
        assert algorithms.ALGORITHM_DEFAULTS[name] == module.DEFAULTS
        assert callable(module.wrap)


def test_unknown_algorithm_names_the_valid_ones() -> None:
    with pytest.raises(SpecError, match="choose one of sync, async, bmuf, easgd, horovod"):
        algorithms.get("hogwild")


@pytest.mark.parametrize("name", ALGORITHMS)
def test_world_size_one_is_plain_local_training(name: str) -> None:
    """No process group exists here: every algorithm must hand back the same objects."""
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    got_model, got_opt = algorithms.get(name).wrap(model, opt, ALONE)
    assert got_model is model and got_opt is opt


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        (
            "bmuf",
            {"block_sise": 4},
            "unknown option\\(s\\) block_sise for algorithm 'bmuf'; valid options: block_lr",
        ),
        ("bmuf", {"block_momentum": 1.5}, "block_momentum must be a number in"),
        ("bmuf", {"block_size": 0}, "block_size must be an integer"),
        ("easgd", {"moving_rate": -0.1}, "moving_rate must be a number in"),
        ("easgd", {"communication_period": 2.5}, "communication_period must be an integer"),
        ("async", {"log_every": -1}, "log_every must be an integer"),
        ("horovod", {"compression": "int8"}, "compression must be none or fp16"),
        ("sync", {"bucket_cap_mb": 0}, "bucket_cap_mb must be a number"),
        ("sync", {"static_graph": "yes"}, "static_graph must be true or false"),
        ("horovod", {"op": "max"}, "op must be average, sum or adasum, got 'max'"),
        ("bmuf", {"block_lr": True}, "block_lr must be a number"),
    ],
)
def test_bad_options_are_one_clear_line_at_submit_and_on_the_ranks(
    name: str, options: dict[str, object], message: str
) -> None:
    """The spec check (at submit) and the rank's check (in ``wrap``) say the same."""
    with pytest.raises(SpecError, match=message):
        JobSpec(name="j", algorithm=name, algorithm_options=options).validate()
    model = torch.nn.Linear(3, 1)
    with pytest.raises(SpecError, match=message):
        algorithms.get(name).wrap(
            model, torch.optim.SGD(model.parameters(), lr=0.1), ALONE, **options
        )


def test_every_default_passes_its_own_check_and_is_shown_in_help() -> None:
    shown = algorithms.describe()
    for name, defaults in algorithms.ALGORITHM_DEFAULTS.items():
        assert algorithms.check(name, {}) == defaults
        line = next(x for x in shown.splitlines() if x.startswith(f"{name}: "))
        assert [part.split("=")[0] for part in line.removeprefix(f"{name}: ").split(", ")] == list(
            defaults
        )


@pytest.mark.parametrize(
    ("name", "key", "world", "value"),
    [("bmuf", "block_momentum", 4, 0.75), ("easgd", "moving_rate", 3, 0.3)],
)
def test_derived_defaults_follow_the_world_size(
    name: str, key: str, world: int, value: float
) -> None:
    """BMUF's η = 1 − 1/N (Chen & Huo) and EASGD's α = 0.9/N (Zhang et al.); a given value wins."""
    assert algorithms.check(name, {}, world)[key] == pytest.approx(value)
    assert algorithms.check(name, {key: 0.5}, world)[key] == 0.5
    assert algorithms.check(name, {})[key] is None  # at submit N may not be final


def test_horovod_missing_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "horovod", None)  # import horovod.torch now fails
    monkeypatch.setitem(sys.modules, "horovod.torch", None)
    model = torch.nn.Linear(3, 1)
    two = RankCtx(rank=0, world_size=2, local_rank=0)
    with pytest.raises(BackendError, match=r"run scripts/setup.d/50-horovod.sh"):
        algorithms.get("horovod").wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), two)


def test_horovodrun_argv(tmp_path: Path) -> None:
    spec = JobSpec(name="hvd", workers=3, algorithm="horovod")
    job = JobDir(tmp_path / "j-1")
    argv = horovodrun_args(spec, job, horovodrun="/opt/hr", python="/py")
    assert argv == [
        "/opt/hr", "-np", "3", "-H", "localhost:3", "--gloo", "--start-timeout", "60",
        "/py", "-u", "-m", "alchemist.runtime", str(job.root),
    ]  # fmt: skip
    two_hosts = horovodrun_args(spec, job, hosts=[("a", 2), ("b", 2)], horovodrun="/opt/hr")
    assert two_hosts[3:5] == ["-H", "a:2,b:2"]
    with pytest.raises(BackendError, match="offer 2 slots but the job needs 3"):
        horovodrun_args(spec, job, hosts=[("a", 2)], horovodrun="/opt/hr")


def test_wrapped_optimizer_shares_hyperparameters_with_schedulers() -> None:
    """A scheduler on the user's optimizer changes the lr the wrapper uses (same groups)."""
    from alchemist.runtime.algorithms._base import WrappedOptimizer

    model = torch.nn.Linear(3, 1)
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    wrapped = WrappedOptimizer(inner)
    sched = torch.optim.lr_scheduler.StepLR(inner, step_size=1, gamma=0.5)
    inner.step()
    sched.step()
    assert wrapped.param_groups[0]["lr"] == pytest.approx(0.05)
    assert wrapped.state is inner.state
    assert isinstance(wrapped, torch.optim.Optimizer)  # torch schedulers accept it
