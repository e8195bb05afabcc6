"""The account's runtime folder (the warm pool's socket, the ranks' diagnosis sockets)
cannot be made first by another account, nor pass to the next account given a deleted
one's uid.

What is real: ``config.runtime_dir`` in the machine's temporary directory, the warm
pool's folder and the diagnosis socket folder built on it, concurrent processes, and,
when the tests run as root, another account (``nobody``) making folders there first.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from alchemist.backends.local.pool import state
from alchemist.job import config
from alchemist.runtime import hooks
from tests.support.helpers import NOBODY, as_nobody


def _private(path: Path) -> bool:
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def test_the_runtime_folder_is_private_remembered_and_not_derived_from_the_uid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = config.runtime_dir()
    assert _private(first) and first.parent == Path(tempfile.gettempdir())
    assert config.runtime_dir() == first  # remembered by the home

    # The next account given this uid has another home: it gets a folder of its own.
    other_home = tmp_path / "next-account-home"
    monkeypatch.setenv("ALCHEMIST_HOME", str(other_home))
    try:
        second = config.runtime_dir()
        assert second != first and _private(second)
    finally:
        shutil.rmtree(second, ignore_errors=True)


@pytest.mark.parametrize("damage", ["opened", "link", "removed"])
def test_a_remembered_folder_that_is_no_longer_private_is_replaced(damage: str) -> None:
    first = config.runtime_dir()
    if damage == "opened":
        first.chmod(0o777)
    elif damage == "link":
        first.rmdir()
        first.symlink_to(tempfile.gettempdir())
    else:
        first.rmdir()
    try:
        second = config.runtime_dir()
        assert second != first and _private(second)
    finally:
        if first.is_symlink():
            first.unlink()
        elif first.is_dir():
            first.rmdir()


def test_processes_starting_at_once_agree_on_one_folder() -> None:
    code = "from alchemist.job import config; print(config.runtime_dir())"
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        for _ in range(6)
    ]
    answers = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert len(answers) == 1 and _private(Path(answers.pop()))


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another account needs root")
def test_folders_another_account_made_first_do_not_take_warm_starts_or_diagnosis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``nobody`` makes, before this account's first job, every folder it could guess:
    the names Alchemist used to use (``alchemist-pool-<uid>``, ``alchemist-diag-<uid>``)
    and the runtime folders' prefix. The pool's folder and the socket folder are still
    private folders of this account."""
    monkeypatch.delenv(state.POOL_DIR_VAR)
    tmp = Path(tempfile.gettempdir())
    uid = os.getuid()
    squats = [
        tmp / f"alchemist-pool-{uid}",
        tmp / f"alchemist-diag-{uid}",
        tmp / f"alchemist-{uid}-",
    ]
    made = [p for p in squats if not p.exists()]
    for path in made:
        got = as_nobody("mkdir", "-m", "0777", str(path))
        assert got.returncode == 0 and path.stat().st_uid == NOBODY, got
    try:
        pools = state.base_dir()
        sockets = hooks.make_socket_dir()
        assert _private(pools) and _private(sockets)
        assert pools.parent == sockets.parent == config.runtime_dir()
        assert _private(state.pool_dir())
    finally:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
