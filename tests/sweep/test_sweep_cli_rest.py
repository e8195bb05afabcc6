"""``alchemist sweep list|show|cancel|resume`` and ``GET/DELETE .../alchemist/api/v1/sweeps``
for real sweeps, on a real Jupyter server with the extension (pytest-jupyter's server,
real HTTP).

Real parts: the sweeps (``alchemist.sweep.start``: the driver process, Optuna, each trial
a job on the local backend), the CLI's ``main`` (argument parsing, output, exit codes),
the server and its handlers, the files' modes and, when the tests run as root, another
account (``nobody``) trying to read a sweep. One sweep of two settings runs to its end
once for the module; a second one (a cell that sleeps) is stopped: its driver killed,
resumed, then the sweep cancelled. Stand-in: the test of the trials' order writes the
files a driver writes (``sweep.json``, ``state.json``, ``trials.json``) itself, to have
a minimised objective, a failed trial and one that never logged, without running them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403  (fixtures: jp_fetch and the rest)

from alchemist import cli, client
from alchemist.job import config
from alchemist.job.jobdir import atomic_write_json
from alchemist.job.spec import JobState
from alchemist.job.sweepdir import SweepDir
from alchemist.sweep import api as sweep_api
from alchemist.sweep.driver import driver_running
from alchemist.sweep.space import parse_params
from alchemist.sweep.spec import SweepSpec
from alchemist.sweep.text import sorted_trials, trials_table
from tests.conftest import processes_under
from tests.server import conftest as server_fixtures
from tests.support.helpers import as_nobody
from tests.support.jobs import USER

# The REST tests' server and user: those of tests/server (a real Jupyter server with the
# extension, its user JUPYTERHUB_USER, and ``api`` calling it).
jp_server_config = server_fixtures.jp_server_config
hub_user = server_fixtures.hub_user
api = server_fixtures.api

#: Each trial logs val_acc at 3 steps; lr=0.3 is the best setting (1.0 at every step).
CELL = """
import time
import alchemist
lr = 0.1
for step in range(3):
    alchemist.log(step, val_acc=1 - abs(lr - 0.3) * (step + 1))
    time.sleep(0.3)
"""
#: A trial that logs once, then runs until it is cancelled.
LONG_CELL = """
import time
import alchemist
lr = 0.1
alchemist.log(0, val_acc=lr)
time.sleep(600)
"""


def _env(mp: pytest.MonkeyPatch, home: Path) -> None:
    """The environment the conftest gives a test, for ``home`` (and the server's user)."""
    mp.setenv("ALCHEMIST_HOME", str(home))
    mp.delenv("ALCHEMIST_DB_URL", raising=False)
    mp.delenv("ALCHEMIST_BACKEND", raising=False)
    mp.setenv("ALCHEMIST_ADMISSION_DIR", str(home / "admission"))
    mp.setenv("ALCHEMIST_LOCAL_CPU_SLOTS", "64")
    mp.delenv("ALCHEMIST_LOCAL_GPUS", raising=False)
    mp.setenv("JUPYTERHUB_USER", USER)


@pytest.fixture(scope="module")
def finished() -> Iterator[tuple[Path, str]]:
    """``(home, sweep id)``: a 2-setting grid sweep run to its end, once for the module,
    started under umask 0.

    Its home sits in folders other accounts may enter (0755), and its ``sweeps`` folder
    is open too (as a folder made by hand might be): only the sweep's own folder can
    keep others out.
    """
    top = Path(tempfile.mkdtemp(prefix="alchemist-sweep-"))
    home = top / "home"
    (home / "sweeps").mkdir(parents=True)
    for folder in (top, home, home / "sweeps"):
        os.chmod(folder, 0o755)
    try:
        with pytest.MonkeyPatch.context() as mp:
            _env(mp, home)
            umask = os.umask(0)  # whatever the umask, the sweep's files are the user's
            try:
                sweep = sweep_api.start(
                    CELL,
                    ["lr=0.1,0.3"],
                    "val_acc",
                    namespace={},
                    name="lrgrid",
                    workers=1,
                    seed=0,
                )
            finally:
                os.umask(umask)
            state = sweep.wait(timeout=120)
            assert state["state"] == "succeeded", (state, sweep.dir.driver_log.read_text())
        yield home, sweep.id
    finally:
        _gone, left = psutil.wait_procs(processes_under(home), timeout=5)
        for p in left:
            p.kill()
        shutil.rmtree(top, ignore_errors=True)
    assert not left, f"the finished sweep left {len(left)} process(es) behind"


@pytest.fixture
def in_finished(
    finished: tuple[Path, str], alchemist_home: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """This test runs in the finished sweep's home; returns the sweep's id."""
    _env(monkeypatch, finished[0])
    return finished[1]


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def rest(jp_asyncio_loop: Any, api: Any) -> Any:
    """``rest(method, *path_parts, params=, body=)`` → ``(status, json)``: ``api`` for
    tests that are not coroutines (the server runs in this loop while a request waits)."""

    def call(method: str, *parts: str, **kwargs: Any) -> tuple[int, Any]:
        result: tuple[int, Any] = jp_asyncio_loop.run_until_complete(api(method, *parts, **kwargs))
        return result

    return call


# -- the finished sweep ------------------------------------------------------------------------


def test_list_shows_the_sweep_its_trials_done_and_best(
    in_finished: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, "sweep", "list")
    assert (code, err) == (0, "")
    header, row = out.splitlines()
    assert header.split() == ["ID", "NAME", "STATE", "TRIALS", "CREATED", "BEST", "SETTING"]
    assert row.startswith(f"{in_finished}  lrgrid  succeeded  2/2  ")
    assert row.endswith("val_acc=1  lr=0.3")

    code, out, _ = _cli(capsys, "sweep", "list", "--json")
    (summary,) = json.loads(out)
    assert summary["id"] == in_finished and summary["state"] == "succeeded"
    assert (summary["trials_done"], summary["trials_total"]) == (2, 2)
    assert summary["best"]["params"] == {"lr": 0.3} and summary["best"]["value"] == 1.0


def test_show_gives_the_definition_the_trials_best_first_and_the_answer(
    in_finished: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, "sweep", "show", in_finished)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"sweep {in_finished} (lrgrid)"
    assert "  state:     succeeded" in lines
    assert "  objective: maximise val_acc" in lines
    assert "  swept:     lr=0.1,0.3" in lines
    assert "  search:    grid, 2 trials, 1 at once, seed 0" in lines
    each_job = next(line for line in lines if line.startswith("  each job:  "))
    assert "workers=1" in each_job and "OMP_NUM_THREADS" in each_job  # env: by name only
    table = lines[lines.index("") + 1 :]
    assert table[0].split() == ["#", "SETTING", "STATE", "STEP", "VAL_ACC", "JOB", "REASON"]
    trials = {t["number"]: t for t in sweep_api.attach(in_finished).trials()}
    best = next(t for t in trials.values() if t["params"] == {"lr": 0.3})
    other = next(t for t in trials.values() if t["params"] == {"lr": 0.1})
    assert table[1].split() == [str(best["number"]), "lr=0.3", "complete", "2", "1", best["job_id"]]
    # lr=0.1 either ran to its end (0.4) or was pruned at its first step (0.8, below
    # the finished trial's 1.0), depending on which setting the grid ran first
    assert table[2].split()[:3] == [str(other["number"]), "lr=0.1", other["state"]]
    assert other["state"] in ("complete", "pruned")
    assert out.rstrip().endswith(
        f"best: lr=0.3 (val_acc=1 at step 2, trial {best['number']}, job {best['job_id']})"
    )
    for t in trials.values():  # each trial is an ordinary job that ran and ended
        assert client.attach(t["job_id"]).status().state.is_terminal


def test_show_json_is_the_sweeps_dict(in_finished: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "sweep", "show", in_finished, "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown == json.loads(json.dumps(sweep_api.attach(in_finished).to_dict()))
    assert shown["spec"]["objective"] == "val_acc" and shown["spec"]["trials"] == 2
    assert sorted(t["params"]["lr"] for t in shown["trials"]) == [0.1, 0.3]


def test_rest_lists_and_gets_the_sweep(in_finished: str, rest: Any) -> None:
    code, body = rest("GET", "sweeps")
    assert code == 200
    assert body["skipped"] == []
    (summary,) = body["sweeps"]
    assert summary["id"] == in_finished and summary["name"] == "lrgrid"
    assert (summary["state"], summary["trials_done"], summary["trials_total"]) == (
        "succeeded",
        2,
        2,
    )
    assert summary["best"]["params"] == {"lr": 0.3}

    code, body = rest("GET", "sweeps", in_finished)
    assert code == 200
    assert body == json.loads(json.dumps(sweep_api.attach(in_finished).to_dict()))
    assert body["best"]["value"] == 1.0 and len(body["trials"]) == 2

    code, body = rest("GET", "sweeps", in_finished, params={"zzz": "1"})
    assert code == 400 and "unknown query argument" in body["message"]


def test_rest_cancel_of_a_finished_sweep_changes_nothing(
    in_finished: str, rest: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code, body = rest("DELETE", "sweeps", in_finished)
    assert code == 200 and body["state"] == "succeeded"
    assert not sweep_api.attach(in_finished).dir.cancel_marker.exists()
    code, out, _ = _cli(capsys, "sweep", "cancel", in_finished)
    assert (code, out) == (0, f"sweep {in_finished} had already ended: succeeded\n")
    code, out, _ = _cli(capsys, "sweep", "resume", in_finished)
    assert (code, out) == (0, f"sweep {in_finished} not resumed: it has ended (succeeded)\n")


# -- privacy -----------------------------------------------------------------------------------


def _open_to_others(root: Path) -> list[str]:
    """Every path under ``root`` (``root`` too) that group or others may use."""
    return [
        f"{p.relative_to(root.parent)} {stat.filemode(p.lstat().st_mode)}"
        for p in [root, *root.rglob("*")]
        if p.lstat().st_mode & 0o077
    ]


def test_the_sweeps_folder_and_everything_in_it_are_private(in_finished: str) -> None:
    """Started under umask 0: every folder of the sweep is 0700 and no file in it is open
    to group or others (the driver's own files: journal, view, log, lock, TensorBoard)."""
    root = config.sweeps_root() / in_finished
    assert {p.name for p in root.iterdir()} >= {
        "sweep.json",
        "state.json",
        "trials.json",
        "journal.log",
        "driver.log",
        "driver.lock",
        "template",
    }
    assert {"source.py", "namespace.pkl"} <= {p.name for p in (root / "template").iterdir()}
    folders = [p for p in [root, *root.rglob("*")] if p.is_dir()]
    assert {str(p.relative_to(root)): p.stat().st_mode & 0o777 for p in folders} == {
        str(p.relative_to(root)): 0o700 for p in folders
    }
    assert _open_to_others(root) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another account")
def test_another_user_cannot_list_or_read_the_sweep(in_finished: str) -> None:
    """``nobody`` may enter the home and the sweeps folder (both left open here), and
    still gets nothing of the sweep: its folder is 0700."""
    root = config.sweeps_root() / in_finished
    assert as_nobody("ls", str(root.parent)).returncode == 0  # the folder above is open
    for argv in (
        ["ls", str(root)],
        ["cat", str(root / "sweep.json")],
        ["cat", str(root / "trials.json")],
        ["cat", str(root / "journal.log")],
        ["cat", str(root / "template" / "source.py")],
        ["cat", str(root / "template" / "namespace.pkl")],
    ):
        done = as_nobody(*argv)
        assert done.returncode != 0 and "Permission denied" in done.stderr, (argv, done)
        assert done.stdout == ""


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["show", "wnotanid"], "'wnotanid' is not a sweep id (they look like w1a2b3c4d5e)"),
        (["show", "wnotanid", "--json"], "'wnotanid' is not a sweep id"),
        (["show", "w0000000000"], "no sweep w0000000000 (see alchemist sweep list)"),
        (["cancel", "w0000000000"], "no sweep w0000000000"),
        (["resume", "jabc"], "'jabc' is not a sweep id"),
    ],
)
def test_an_id_that_is_no_sweep_is_one_line_and_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, "sweep", *argv)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("alchemist: error: "), err
    assert says in err and "Traceback" not in err


def test_no_sweeps_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(capsys, "sweep", "list") == (0, "no sweeps yet\n", "")
    assert _cli(capsys, "sweep", "list", "--json") == (0, "[]\n", "")


def test_rest_unknown_and_malformed_ids_are_404(
    rest: Any, jp_fetch: Any, jp_asyncio_loop: Any
) -> None:
    code, body = rest("GET", "sweeps")
    assert (code, body) == (200, {"sweeps": [], "skipped": []})
    for method in ("GET", "DELETE"):
        for sweep_id, says in (
            ("w0000000000", "no sweep w0000000000"),
            ("wnotanid", "'wnotanid' is not a sweep id"),
            ("jnosuchjob", "'jnosuchjob' is not a sweep id"),
        ):
            code, body = rest(method, "sweeps", sweep_id)
            assert code == 404, (method, sweep_id, body)
            assert says in body["message"] and len(body["message"].splitlines()) == 1
    # an id no route takes (as for jobs): the server's own 404
    response = jp_asyncio_loop.run_until_complete(
        jp_fetch("alchemist", "api", "v1", "sweeps", "-bad", method="GET", raise_error=False)
    )
    assert response.code == 404


# -- the order of the trials -------------------------------------------------------------------


def _recorded(mode: str, trials: list[dict[str, Any]]) -> SweepDir:
    """A sweep's files as its driver leaves them (the stand-in of this test)."""
    spec = SweepSpec.make("recorded", parse_params(["x=1,2,3,4"]), "loss", mode=mode)
    sd = SweepDir(config.sweeps_root() / sweep_api.new_sweep_id()).create()
    atomic_write_json(sd.config, {**spec.to_dict(), "created": time.time(), "owner": USER})
    sd.write_state(state="succeeded", reason=None)
    complete = [t for t in trials if t["state"] == "complete"]
    best = (min if mode == "min" else max)(complete, key=lambda t: t["value"])
    atomic_write_json(sd.trials, {"sweep_id": sd.sweep_id, "trials": trials, "best": best})
    return sd


def _trial(number: int, x: int, state: str, value: float | None, reason: str | None = None) -> Any:
    return {
        "number": number,
        "params": {"x": x},
        "state": state,
        "job_id": f"j{number:010d}",
        "value": value,
        "step": None if value is None else 9,
        "started": 1.0,
        "finished": 2.0,
        "reason": reason,
    }


TRIALS = [
    _trial(0, 1, "failed", None, "failed: CUDA out of memory"),
    _trial(1, 2, "complete", 0.5),
    _trial(2, 3, "pruned", 0.1, "pruned by sweep at step 9"),  # better, but not a result
    _trial(3, 4, "complete", 0.25),
]


@pytest.mark.parametrize(("mode", "order"), [("min", [3, 1, 2, 0]), ("max", [1, 3, 2, 0])])
def test_trials_sort_best_first_by_the_mode_and_those_without_a_value_last(
    mode: str, order: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    assert [t["number"] for t in sorted_trials(TRIALS, mode)] == order
    sd = _recorded(mode, TRIALS)
    code, out, _ = _cli(capsys, "sweep", "show", sd.sweep_id)
    assert code == 0
    lines = out.splitlines()
    table = lines[lines.index("") + 1 : lines.index("") + 6]
    assert table == trials_table(TRIALS, "loss", mode).splitlines()
    assert [int(r.split()[0]) for r in table[1:]] == order
    assert table[4].split()[1:6] == ["x=1", "failed", "-", "-", "j0000000000"]
    assert table[4].endswith("  failed: CUDA out of memory")
    best = {"min": (4, 0.25), "max": (2, 0.5)}[mode]
    assert lines[-1].startswith(f"best: x={best[0]} (loss={best[1]:.4g} at step 9")
    assert f"  objective: {mode}imise loss" in lines


def test_list_is_newest_first(capsys: pytest.CaptureFixture[str]) -> None:
    old = _recorded("min", TRIALS)
    new = _recorded("max", TRIALS)
    record = json.loads(old.config.read_text())
    atomic_write_json(old.config, {**record, "created": record["created"] - 3600})
    _code, out, _ = _cli(capsys, "sweep", "list")
    assert [line.split()[0] for line in out.splitlines()[1:]] == [new.sweep_id, old.sweep_id]
    assert out.splitlines()[1].split()[-2:] == ["loss=0.5", "x=2"]
    assert out.splitlines()[2].split()[-2:] == ["loss=0.25", "x=4"]


# -- a sweep stopped: its driver killed, resumed, then cancelled --------------------------------


def test_resume_restarts_a_killed_driver_and_cancel_stops_the_trials(
    alchemist_home: Path, rest: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = sweep_api.start(LONG_CELL, ["lr=0.1,0.2"], "val_acc", namespace={}, workers=1)
    try:
        deadline = time.monotonic() + 60
        while not any(t["step"] == 0 for t in sweep.trials()):  # trial 0 runs and has logged
            assert time.monotonic() < deadline, sweep.dir.driver_log.read_text()
            time.sleep(0.2)
        (trial,) = [t for t in sweep.trials() if t["job_id"]]  # the other one waits
        job = client.attach(trial["job_id"])
        assert job.status().state == JobState.RUNNING

        # The machine "restarts" the driver away; the trial's job runs on.
        os.kill(sweep.dir.read_state()["driver_pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while driver_running(sweep.dir):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        code, out, _ = _cli(capsys, "sweep", "show", sweep.id)
        assert code == 0
        assert (
            f"  state:     running: its driver is not running (the machine restarted?):"
            f" resume it with alchemist sweep resume {sweep.id}"
        ) in out.splitlines()

        code, out, _ = _cli(capsys, "sweep", "resume", sweep.id)
        assert (code, out) == (
            0,
            f"sweep {sweep.id}: its driver started again; it goes on with its trials\n",
        )
        assert driver_running(sweep.dir) and job.status().state == JobState.RUNNING
        code, out, _ = _cli(capsys, "sweep", "resume", sweep.id)
        assert (code, out) == (0, f"sweep {sweep.id} not resumed: its driver is already running\n")

        code, body = rest("GET", "sweeps", sweep.id)
        assert (code, body["state"], body["driver"]) == (200, "running", True)

        code, out, err = _cli(capsys, "sweep", "cancel", sweep.id)
        assert (code, out, err) == (0, f"sweep {sweep.id} cancelled: cancelled by the user\n", "")
    finally:
        sweep.cancel()
    assert not driver_running(sweep.dir)
    status = job.status()
    assert status.state == JobState.CANCELLED and "the sweep was cancelled" in str(status.reason)
    trials = sweep.trials()
    assert trials[0]["state"] == "failed" and trials[0]["reason"] == "the sweep was cancelled"
    assert [t["job_id"] for t in trials[1:]] == [None]  # the second setting never ran
    # No process of the sweep is left: its driver, the job's supervisor and rank.
    _gone, left = psutil.wait_procs(processes_under(alchemist_home), timeout=10)
    assert left == [], [p.cmdline() for p in left if p.is_running()]

    # Cancelling again (here over REST) is a no-op that says how the sweep is.
    code, body = rest("DELETE", "sweeps", sweep.id)
    assert (code, body["state"], body["reason"]) == (200, "cancelled", "cancelled by the user")
    code, out, _ = _cli(capsys, "sweep", "resume", sweep.id)
    assert out == f"sweep {sweep.id} not resumed: it has ended (cancelled: cancelled by the user)\n"
