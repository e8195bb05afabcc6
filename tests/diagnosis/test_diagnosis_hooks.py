"""The rank hooks and the stack collector on real processes (no torch, no torchrun).

Real parts: each test starts a real Python process that installs the real hooks
(``alchemist.runtime.hooks.install``) into a real job directory; stacks are asked
for with a real ``SIGUSR1`` by ``alchemist.diagnosis.collect`` and parsed from what
faulthandler wrote; waits poll for a condition with a deadline. One stand-in: the
liveness test writes torchrun's failure report into the launcher log by hand (in
torchrun's format; a real one is read in test_diagnosis_jobs.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from alchemist.diagnosis import collect, stacks
from alchemist.job.jobdir import JobDir
from alchemist.runtime import hooks

HEADER = """
import os, sys, threading, time
from pathlib import Path
from alchemist.runtime import hooks
from alchemist.job.jobdir import JobDir
job_dir = JobDir(Path(sys.argv[1]))
hooks.install(job_dir, 0)
"""


def wait_for(cond: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def rank_process(tmp_path: Path) -> Iterator[Callable[..., tuple[JobDir, subprocess.Popen[bytes]]]]:
    """``start(body, env=)``: run HEADER + body as "rank 0" of a job directory."""
    started: list[subprocess.Popen[bytes]] = []

    def start(
        body: str, env: dict[str, str] | None = None
    ) -> tuple[JobDir, subprocess.Popen[bytes]]:
        job_dir = JobDir(tmp_path / f"job{len(started)}").create()
        script = tmp_path / f"user_code_{len(started)}.py"
        script.write_text(HEADER + body)
        proc = subprocess.Popen(
            [sys.executable, str(script), str(job_dir.root)],
            env={**os.environ, **(env or {})},
            stdout=open(job_dir.root / "out.txt", "wb"),  # noqa: SIM115 - the child's
            stderr=subprocess.STDOUT,
        )
        started.append(proc)
        wait_for(lambda: hooks.read_marker(job_dir, 0), 30, "the hooks marker")
        return job_dir, proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def _ask(job_dir: JobDir, proc: subprocess.Popen[bytes]) -> list[stacks.Thread]:
    marker = hooks.read_marker(job_dir, 0)
    assert marker is not None and marker["pid"] == proc.pid
    rp = collect.RankProcess(0, psutil.Process(proc.pid), marker["main_thread"])
    text = collect.request_stacks(job_dir, {0: rp}, timeout=3.0)
    assert 0 in text, "the process did not answer"
    return stacks.parse_dump(text[0])


def test_a_signalled_rank_writes_its_main_thread_s_stack(rank_process: Callable[..., Any]) -> None:
    body = (
        "def load_batch():\n"
        "    print('loading', flush=True)\n"
        "    time.sleep(60)\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "load_batch()\n"
    )
    job_dir, proc = rank_process(body)
    wait_for(lambda: b"loading" in (job_dir.root / "out.txt").read_bytes(), 30, "loading")
    threads = _ask(job_dir, proc)
    marker = hooks.read_marker(job_dir, 0)
    assert marker is not None
    # The interrupted main thread alone ("Stack (most recent call first):"): dumping
    # the others from a signal handler can crash the rank.
    assert len(threads) == 1 and threads[0].id is None
    main = stacks.main_thread(threads, marker["main_thread"])
    assert main is not None
    act = stacks.activity(main)
    assert act.user_frame is not None
    assert act.user_frame.function == "load_batch"
    assert act.user_frame.file.endswith("user_code_0.py")
    assert act.user_frame.line == HEADER.count("\n") + 3  # the time.sleep(60) line
    assert act.collective is None
    assert proc.poll() is None, "asking for stacks must not stop the process"
    # a second request appends a second dump and is read on its own
    assert len(_ask(job_dir, proc)) == 1
    assert (hooks.stacks_path(job_dir, 0).stat().st_mode & 0o777) == 0o600


def test_signals_while_another_thread_runs_python_do_not_crash_the_rank(
    rank_process: Callable[..., Any],
) -> None:
    """Regression: with every thread dumped (``all_threads=True``) this process died of
    SIGSEGV within about a hundred signals while its thread imported torch."""
    body = (
        "def load():\n"
        "    import torch, torch.nn, torch.distributed\n"
        "t = threading.Thread(target=load)\n"
        "print('importing', flush=True)\n"
        "t.start()\n"
        "while t.is_alive():\n"
        "    time.sleep(0.001)\n"
        "print('imported', flush=True)\n"
        "time.sleep(60)\n"
    )
    job_dir, proc = rank_process(body)
    out = job_dir.root / "out.txt"
    wait_for(lambda: b"importing" in out.read_bytes(), 30, "importing")
    sent = 0
    while b"imported" not in out.read_bytes():
        assert proc.poll() is None, (proc.returncode, out.read_text())
        proc.send_signal(hooks.STACK_SIGNAL)
        sent += 1
        time.sleep(0.005)
    assert proc.poll() is None, (proc.returncode, out.read_text())
    assert sent > 20, "the import was too quick to test anything"


def test_a_rank_in_c_code_holding_the_gil_still_answers(
    rank_process: Callable[..., Any], tmp_path: Path
) -> None:
    """A catastrophic ``re`` match runs in C and never releases the GIL: the ticker
    thread stops (which proves the GIL is held), yet the stacks come."""
    tick = tmp_path / "tick"
    body = (
        "import re\n"
        f"tick = {str(tick)!r}\n"
        "def ticker():\n"
        "    while True:\n"
        "        Path(tick).write_text(str(time.monotonic()))\n"
        "        time.sleep(0.01)\n"
        "threading.Thread(target=ticker, daemon=True).start()\n"
        "time.sleep(0.2)\n"
        "print('matching', flush=True)\n"
        "re.match(r'(a+)+b', 'a' * 64)\n"
    )
    job_dir, proc = rank_process(body)
    wait_for(lambda: b"matching" in (job_dir.root / "out.txt").read_bytes(), 30, "matching")
    time.sleep(0.3)  # let the match start; then check the ticker is frozen
    frozen_at = tick.read_text()
    t0 = time.monotonic()
    threads = _ask(job_dir, proc)
    took = time.monotonic() - t0
    assert tick.read_text() == frozen_at, "the ticker ran: the GIL was not held"
    assert took < 1.0, took
    marker = hooks.read_marker(job_dir, 0)
    main = stacks.main_thread(threads, marker["main_thread"] if marker else None)
    assert main is not None
    act = stacks.activity(main)
    assert act.user_frame is not None and act.user_frame.function == "<module>"
    assert act.user_frame.line == HEADER.count("\n") + 10  # the re.match line


def test_the_watchdog_writes_stacks_when_the_rank_stops_advancing(
    rank_process: Callable[..., Any],
) -> None:
    """While the rank calls ``rearm`` (as alchemist.log does) the watchdog is quiet;
    once it stops, the stacks are written with no request."""
    body = (
        "def advance():\n"
        "    end = time.monotonic() + 2.5\n"
        "    while time.monotonic() < end:\n"
        "        hooks.rearm()\n"
        "        time.sleep(0.01)\n"
        "def stuck():\n"
        "    print('stuck', flush=True)\n"
        "    time.sleep(60)\n"
        "advance()\n"
        "stuck()\n"
    )
    job_dir, _proc = rank_process(body, env={hooks.WATCHDOG_VAR: "1.5"})
    path = hooks.watchdog_path(job_dir, 0)
    wait_for(lambda: path.exists() and "stuck" in path.read_text(), 30, "a watchdog dump")
    text = path.read_text()
    assert text.startswith(stacks.TIMEOUT_HEADER)
    assert "advance" not in text, "the watchdog fired while the rank advanced"
    found = collect.watchdog_stacks(job_dir, 0)
    assert found is not None
    main = stacks.main_thread(stacks.parse_dump(found[0]), None)
    assert main is not None
    frame = stacks.activity(main).user_frame
    assert frame is not None and frame.function == "stuck"


def test_the_watchdog_does_not_crash_a_rank_that_runs_python(
    rank_process: Callable[..., Any],
) -> None:
    """Regression: faulthandler's own watchdog (``dump_traceback_later``) killed a rank
    with SIGSEGV when it fired while the rank imported torch. A 50 ms watchdog dumps
    dozens of times during the import here, and the process ends well."""
    body = "import torch, torch.nn, torch.distributed\nprint('imported', flush=True)\n"
    job_dir, proc = rank_process(body, env={hooks.WATCHDOG_VAR: "0.05"})
    assert proc.wait(timeout=120) == 0, (job_dir.root / "out.txt").read_text()
    dumps = hooks.watchdog_path(job_dir, 0).read_text().count(stacks.TIMEOUT_HEADER)
    assert dumps >= 5, dumps


def test_rearm_is_cheap(rank_process: Callable[..., Any]) -> None:
    """Re-arming on every alchemist.log call stores a clock reading."""
    body = (
        "n = 100_000\n"
        "t = time.perf_counter()\n"
        "for _ in range(n):\n"
        "    hooks.rearm()\n"
        "print(f'rearm_us={(time.perf_counter() - t) / n * 1e6:.3f}', flush=True)\n"
    )
    job_dir, proc = rank_process(body)
    proc.wait(timeout=60)
    out = (job_dir.root / "out.txt").read_text()
    mean_us = float(out.split("rearm_us=")[1].split()[0])
    print(f"hooks.rearm: {mean_us:.3f} µs per call")
    assert mean_us < 5.0, out


def test_a_bad_watchdog_setting_is_one_line_in_the_log_and_no_failure(
    rank_process: Callable[..., Any],
) -> None:
    job_dir, proc = rank_process("print('ran', flush=True)\n", env={hooks.WATCHDOG_VAR: "soon"})
    proc.wait(timeout=60)
    out = (job_dir.root / "out.txt").read_text()
    assert proc.returncode == 0 and "ran" in out
    assert (
        "[alchemist] warning: ALCHEMIST_WATCHDOG_S must be a number of seconds, got 'soon';"
        " the watchdog uses 60 s"
    ) in out
    marker = hooks.read_marker(job_dir, 0)
    assert marker is not None and marker["watchdog_s"] == 60.0


def test_liveness_from_pid_files_processes_and_records(tmp_path: Path) -> None:
    """Rank 0 runs (a real process naming the job directory, as ranks do), rank 1's
    process is gone with torchrun's report of its SIGKILL in the launcher log, rank 2
    recorded that its code finished, rank 3 never started."""
    from alchemist.job import outcomes

    job_dir = JobDir(tmp_path / "job").create()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)", str(job_dir.root)]
    alive = subprocess.Popen(sleeper)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        (job_dir.pids / "rank-0.pid").write_text(str(alive.pid))
        (job_dir.pids / "rank-1.pid").write_text(str(gone.pid))
        (job_dir.pids / "rank-2.pid").write_text(str(gone.pid))
        outcomes.record(job_dir, 2, 0, 0)
        job_dir.launcher_log.write_text(
            "Failures:\n  <NO_OTHER_FAILURES>\nRoot Cause (first observed failure):\n[0]:\n"
            "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 1)\n"
        )
        live = collect.liveness(job_dir, 4)
        assert [live[r].state for r in range(4)] == ["running", "dead", "finished", "not started"]
        assert live[0].pid == alive.pid
        assert live[1].exit == "was killed by signal 9 (SIGKILL) (out of memory?)"
        # no hooks marker: no rank is signalled
        assert collect.rank_processes(job_dir, 4) == {}
    finally:
        alive.kill()
        alive.wait()


def test_the_watchdog_file_starts_again_past_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank stuck for days must not fill the disk: past the limit (three dumps here)
    the file starts again with the newest dump. (The watchdog runs in this test process,
    whose thread count depends on the tests before it, so the limit is set from the size
    of one dump: with a fixed 4 kB, one dump of a many-threaded process was larger than
    the limit and the file could never shrink.)"""
    measured: list[int] = []
    measure = threading.Thread(
        target=lambda: measured.append(len(hooks.all_thread_stacks("Timeout (0:00:00)!")))
    )
    measure.start()
    measure.join()
    one_dump = measured[0]
    limit = 3 * one_dump
    monkeypatch.setattr(hooks, "WATCHDOG_MAX_BYTES", limit)
    path = tmp_path / "watchdog.txt"
    dog = hooks._Watchdog(hooks._open_private(path), 0.02)
    sizes = [0]

    def shrank() -> bool:
        sizes.append(path.stat().st_size if path.exists() else 0)
        return sizes[-1] < max(sizes)

    try:
        wait_for(shrank, 30, "the file to start again")
    finally:
        dog.stop()
        dog._thread.join(5)  # no dump half-written when the file is read
    largest_dump = max(len(d) for d in path.read_text().split(stacks.TIMEOUT_HEADER))
    assert max(sizes) < limit + 2 * largest_dump + 1000, sizes
    assert path.read_text().startswith(stacks.TIMEOUT_HEADER)
