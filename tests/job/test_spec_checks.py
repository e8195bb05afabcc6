"""Job options that would silently break a job are refused at submit, in one line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from alchemist import cli, client
from alchemist.errors import SpecError


@pytest.mark.parametrize(
    "key", ["RANK", "MASTER_PORT", "WORLD_SIZE", "ALCHEMIST_JOB_DIR", "LD_PRELOAD", "HOROVOD_RANK"]
)
def test_env_may_not_override_what_the_runtime_sets(key: str) -> None:
    with pytest.raises(SpecError, match=rf"{key} is set by Alchemist .* cannot be overridden"):
        client.submit("pass", namespace={}, env={key: "9"}, dry_run=True)
    assert client.jobs() == []


@pytest.mark.parametrize("name", ["None", "class", "1x", "a-b", ""])
def test_outputs_must_be_names_a_cell_can_assign(name: str) -> None:
    with pytest.raises(SpecError, match="is not a Python variable name"):
        client.submit("pass", namespace={}, outputs=[name], dry_run=True)


def test_ordinary_env_and_outputs_pass() -> None:
    dry = client.submit("x = 1", namespace={}, env={"SEED": "7"}, outputs=["x"], dry_run=True)
    assert dry.spec.env == {"SEED": "7"} and dry.spec.outputs == ["x"]


def test_the_local_backend_says_which_options_it_ignores(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dry = client.submit("x = 1", namespace={}, image="img:1", memory="8Gi", dry_run=True)
    assert "# warning: the local backend ignores --image, --memory" in dry.text
    job = client.submit("x = 1", namespace={}, workers=1, cpu="4")
    assert job.warnings == [
        "the local backend ignores --cpu (they size Kubernetes pods): its jobs run in this"
        " environment, on this machine's cores and memory"
    ]
    assert job.wait(timeout=120).state.value == "succeeded"
    assert client.submit("x = 1", namespace={}, dry_run=True).info.warnings == []


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("timeout", math.inf, "timeout must be a finite number of seconds"),  # JSON's 1e400
        ("timeout", -math.inf, "timeout must be a finite number of seconds"),
        ("timeout", math.nan, "timeout must be a finite number of seconds"),
        ("timeout", 1e-320, "timeout must be at least 1 s"),
        ("timeout", 0, "timeout must be at least 1 s"),
        ("timeout", 1e300, "timeout must be at most 31622400 s"),
        ("timeout", "60", "timeout must be a number of seconds"),
        ("workers", 10**30, "workers must be at most 10000"),
        pytest.param(
            "workers",
            10**5000,
            "workers must be at most 10000, got an integer of 16610 bits",
            id="workers-5000-digits",
        ),
        ("workers", True, "workers must be an integer"),
        ("gpus_per_worker", 4096, "gpus_per_worker must be at most 64"),
        ("gpus_per_worker", -1, "gpus_per_worker must be at least 0"),
        ("max_restarts", 10**9, "max_restarts must be at most 10000"),
        ("global_batch", 10**12, "global_batch must be at most 1000000000"),
        ("global_batch", 8.0, "global_batch must be an integer"),
    ],
)
def test_numbers_that_are_not_finite_or_absurd_are_refused_in_one_line(
    option: str, value: Any, words: str
) -> None:
    """The spec's check: the Python API, the magics, the CLI and the REST API share it."""
    with pytest.raises(SpecError) as info:
        client.submit("pass", namespace={}, dry_run=True, **{option: value})
    assert str(info.value).startswith(words) and len(str(info.value).splitlines()) == 1
    assert client.jobs() == []


@pytest.mark.parametrize("value", ["inf", "nan", "1e400", "1e-320", "-5"])
def test_the_cli_refuses_a_timeout_that_is_not_finite_or_absurd_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    assert cli.main(["submit", str(script), "--dry-run", f"--timeout={value}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("alchemist: error: timeout must be ") and err.count("\n") == 1
    assert client.jobs() == []


def test_numbers_at_their_limits_pass() -> None:
    dry = client.submit(
        "pass", namespace={}, dry_run=True, timeout=1, workers=1, max_restarts=10_000
    )
    assert (dry.spec.timeout, dry.spec.workers, dry.spec.max_restarts) == (1, 1, 10_000)
    dry = client.submit("pass", namespace={}, dry_run=True, timeout=366 * 24 * 3600.0)
    assert dry.spec.timeout == 31622400.0


def test_an_env_value_no_process_can_hold_is_refused_at_submit(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A NUL byte in an ``--env`` value was accepted and then failed the job at start."""
    with pytest.raises(SpecError, match="environment variable TOKEN must be text without NUL"):
        client.make_spec(env={"TOKEN": "abc\0def"})
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    assert cli.main(["submit", str(script), "--env", "TOKEN=abc\0def", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "TOKEN must be text without NUL" in err and err.count("\n") == 1
    assert client.jobs() == []


def test_script_arguments_without_the_separator_get_the_command_that_works(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint(sys.argv)\n")
    with pytest.raises(SystemExit) as e:
        cli.main(["submit", str(script), "-n", "1", "--lr", "0.1", "--dry-run"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err
    hint = f"alchemist submit {script} [OPTIONS] -- --lr 0.1"
    assert err.endswith(hint + "\n"), err
    # The advice, followed, works: the script gets its arguments.
    assert cli.main(["submit", str(script), "-n", "1", "--", "--lr", "0.1"]) == 0
    assert "['train.py', '--lr', '0.1']" in capsys.readouterr().out


def test_metrics_of_a_job_that_logs_none_say_why_and_where_the_system_metrics_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``alchemist metrics`` of a script that never calls ``alchemist.log`` printed
    nothing and exited 0; now one line says why, and ``--system`` shows what was
    recorded of it (the advice, followed)."""
    from alchemist.job.spec import JobState

    wait_for_a_sample = (  # the rank's sampler writes its first within a second or so
        "import os, pathlib, time\n"
        "f = pathlib.Path(os.environ['ALCHEMIST_JOB_DIR'], 'metrics', 'system-rank-0.jsonl')\n"
        "deadline = time.time() + 60\n"
        "while not (f.exists() and f.stat().st_size) and time.time() < deadline:\n"
        "    time.sleep(0.05)\n"
    )
    job = client.submit(wait_for_a_sample, namespace={}, workers=1)
    assert job.wait(timeout=120).state == JobState.SUCCEEDED
    capsys.readouterr()
    assert cli.main(["metrics", job.id]) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == (
        f"alchemist: job {job.id} logged no metrics (its code calls no alchemist.log);"
        f" its system metrics (CPU, memory, GPU): alchemist metrics {job.id} --system\n"
    )
    assert cli.main(["metrics", job.id, "--system"]) == 0
    lines = capsys.readouterr().out.splitlines()
    import json

    first = json.loads(lines[0])
    assert first["rank"] == 0 and "cpu_percent" in first["values"], first


def test_submit_says_the_folder_a_script_runs_in_when_it_is_not_the_callers(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "train.py").write_text("import os\nprint('cwd', os.getcwd())\n")
    monkeypatch.chdir(elsewhere)
    assert cli.main(["submit", "../project/train.py", "-n", "1"]) == 0
    out, err = capsys.readouterr()
    assert (
        f"alchemist: it runs in {project}, the script's folder: its relative paths are read"
        " from there"
    ) in err
    assert f"cwd {project}" in out  # what it said is where it ran
    monkeypatch.chdir(project)
    assert cli.main(["submit", "train.py", "-n", "1", "--detach"]) == 0
    assert "it runs in" not in capsys.readouterr().err  # nothing to say where it is
