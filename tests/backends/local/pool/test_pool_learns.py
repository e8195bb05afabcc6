"""The warm pool learns what its jobs import and preloads it, with nothing configured.

Real: 1-rank local jobs through the real supervisor, daemon and zygotes. scikit-learn
stands for any heavy installed package a user's jobs import (Lightning, Transformers):
it is installed here and no zygote imports it by itself.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from alchemist import client
from alchemist.backends.local.pool import learn, state
from tests.backends.local.pool.conftest import started

Run = Callable[..., client.Job]

USES_SKLEARN = """
import sys
was_preloaded = "sklearn" in sys.modules
import sklearn.linear_model
"""


def _pool() -> state.PoolInfo:
    info = state.read_info(state.pool_dir())
    assert info is not None, "no warm pool"
    return info


def test_a_package_jobs_import_is_preloaded_for_the_next_job(run: Run) -> None:
    first = run(USES_SKLEARN, workers=1, outputs=["was_preloaded"])
    assert started(first) == "warm"
    assert first.outputs()["was_preloaded"] is False
    # Once idle, the daemon prepares a zygote that preloads it, and swaps it in.
    deadline = time.monotonic() + 180
    while "sklearn" not in _pool().preloaded:
        assert time.monotonic() < deadline, (state.pool_dir() / "daemon.log").read_text()
        time.sleep(0.2)
    assert re.search(r"; preloads .*sklearn.* \(your jobs import them\)", state.status()["text"])
    second = run(USES_SKLEARN, workers=1, outputs=["was_preloaded"])
    assert started(second) == "warm"
    assert second.outputs()["was_preloaded"] is True
    # the user's own modules, and Alchemist, are never learned
    learned = learn.learned(state.pool_dir())
    assert "sklearn" in learned and "alchemist" not in learned
    assert "numpy" not in learned and "torch" not in learned  # every zygote has those


def test_a_package_that_starts_threads_on_import_is_never_preloaded(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork does not copy threads: a learned package that starts one when imported is
    marked unsafe and the pool starts without it (jobs still run warm)."""
    (tmp_path / "starts_a_thread.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    folder = state.pool_dir()
    (folder / learn.LEARNED_FILE).write_text('{"modules": ["starts_a_thread", "sklearn"]}\n')
    job = run("x = 1", workers=1)
    assert started(job) == "warm"
    assert _pool().preloaded == ["sklearn"]
    assert learn.unsafe(folder) == {"starts_a_thread"}
    assert learn.learned(folder) == ["sklearn"]
