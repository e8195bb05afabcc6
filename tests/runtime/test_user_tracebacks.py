"""A failing cell's or script's traceback, and its warnings, name the user's file and
show the line, in the rank's log, as torchrun and the kernel do.

Real: 1-rank jobs on the local backend (supervisor, torchrun), a script submitted by
path and a cell by source; the rank's log read as the user reads it.
"""

from __future__ import annotations

from pathlib import Path

from alchemist import client
from alchemist.job.spec import JobState

SCRIPT = """\
import warnings


def load(path):
    warnings.warn("load() is deprecated, use open()", FutureWarning)
    return open(path).read()


data = load("/no/such/file.csv")
"""


def _log(job: client.Job) -> str:
    assert job.wait(timeout=120).state == JobState.FAILED
    return job.job_dir.rank_log(0).read_text()


def test_a_scripts_traceback_and_warnings_name_its_file_and_show_its_lines(
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    log = _log(client.submit(script, workers=1))
    # The warning: file, line, and the line itself (as Python prints for a file).
    assert "train.py:5: FutureWarning: load() is deprecated, use open()" in log, log
    assert '  warnings.warn("load() is deprecated, use open()", FutureWarning)' in log
    # The traceback: the user's frames only, each with its file, line and source.
    tb = log[log.index("Traceback (most recent call last):") :]
    assert 'train.py", line 9, in <module>\n    data = load("/no/such/file.csv")' in tb, tb
    assert 'train.py", line 6, in load\n    return open(path).read()' in tb
    assert "alchemist/runtime" not in tb  # our frames are noise to the user
    assert "FileNotFoundError: [Errno 2] No such file or directory: '/no/such/file.csv'" in tb


def test_a_cells_traceback_shows_its_lines() -> None:
    cell = "x = 1\n\ndef f():\n    return 1 / 0\n\ny = f()\n"
    log = _log(client.submit(cell, namespace={}, workers=1))
    tb = log[log.index("Traceback (most recent call last):") :]
    assert 'File "<cell>", line 6, in <module>\n    y = f()' in tb, tb
    assert 'File "<cell>", line 4, in f\n    return 1 / 0' in tb
    assert "ZeroDivisionError: division by zero" in tb


def test_the_diagnosis_of_a_stuck_script_shows_its_line(tmp_path: Path) -> None:
    """The diagnosis reads a script's frames under its path and quotes the line."""
    import time

    script = tmp_path / "wait.py"
    script.write_text("import time\nprint('ready', flush=True)\ntime.sleep(600)\n")
    job = client.submit(script, workers=1)
    try:
        deadline = time.monotonic() + 120
        while "ready" not in job.logs():
            assert time.monotonic() < deadline and not job.status().state.is_terminal
            time.sleep(0.1)
        entry = job.diagnose()["ranks"][0]
        assert entry["code"] == "time.sleep(600)", entry
        assert "wait.py" in entry["line"], entry
    finally:
        job.cancel()


def test_a_gpu_call_in_a_job_without_gpus_says_what_to_change() -> None:
    cell = "import torch\ntorch.cuda.set_device(0)\n"
    log = _log(client.submit(cell, namespace={}, workers=1))
    hint = (
        "[alchemist] this job has no GPU: submit it with --gpus-per-worker N, or let the"
        " code run on CPU (device = alchemist.context().device picks what the job has)"
    )
    assert hint in log, log
    assert log.index("Traceback") < log.index(hint)  # after torch's own words
    # An error that is not about CUDA gets no such line.
    assert "has no GPU" not in _log(client.submit("1 / 0", namespace={}, workers=1))
