"""The embedded hub's entry point: first start, restart, accounts, mistakes.

Runs the real ``python -m alchemist.hub.embedded`` and the real JupyterHub behind it; log-ins
go through the hub's real login form over HTTP (the browser test does it in Chromium).
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bcrypt
import pytest
import requests

from alchemist.errors import HubConfigError
from alchemist.hub.embedded.__main__ import main
from alchemist.hub.embedded.seed import MARKER, seed_home
from alchemist.hub.embedded.spawner import SingleAccountSpawner
from tests.support.hubproc import RunningHub, fresh_ports, hub_env, start_hub, stop_hub


def http_login(
    hub: RunningHub, user: str, password: str, session: requests.Session | None = None
) -> requests.Response:
    """Submit the hub's login form like a browser; return the (unfollowed) answer."""
    session = session or requests.Session()
    session.get(hub.url + "hub/login", timeout=30)
    return session.post(
        hub.url + "hub/login",
        data={"username": user, "password": password, "_xsrf": session.cookies["_xsrf"]},
        allow_redirects=False,
        timeout=30,
    )


def signup(hub: RunningHub, user: str, password: str) -> requests.Response:
    """Submit NativeAuthenticator's sign-up form."""
    session = requests.Session()
    session.get(hub.url + "hub/signup", timeout=30)
    return session.post(
        hub.url + "hub/signup",
        data={
            "username": user,
            "signup_password": password,
            "signup_password_confirmation": password,
            "_xsrf": session.cookies["_xsrf"],
        },
        timeout=30,
    )


def logged_in(answer: requests.Response) -> bool:
    return answer.status_code == 302 and "/hub/login" not in answer.headers["Location"]


@pytest.fixture
def workdir() -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="alchemist-hub-start-"))
    os.chmod(tmp, 0o755)
    (tmp / "homes").mkdir(mode=0o755)
    yield tmp
    subprocess.run(["rm", "-rf", str(tmp)], check=False)


def run_main(
    env: dict[str, str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "alchemist.hub.embedded", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_first_start_gives_the_admin_password_once_and_stores_only_a_hash(
    workdir: Path,
) -> None:
    """The hub's output here is a log file, not a terminal: the first password is not
    printed (a log is kept, and may be read by others) but put in a 0600 file that the
    banner names, removed at the admin's first log-in (``start_hub`` reads it)."""
    state, homes = workdir / "state", workdir / "homes"
    env = hub_env(state, homes)
    first = start_hub(state, homes, env)
    try:
        assert re.search(r"Alchemist hub: http://127\.0\.0\.1:\d+/", first.log_text())
        assert first.admin_password not in first.log_text()
        handed = state / "admin-password"
        assert f"its password is in {handed}" in first.log_text()
        assert handed.stat().st_mode & 0o777 == 0o600
        assert logged_in(http_login(first, first.admin, first.admin_password))
        assert not handed.exists(), "the admin's first log-in removes the password's file"
        wrong = http_login(first, first.admin, first.admin_password + "x")
        assert not logged_in(wrong)
        assert "Invalid username or password" in wrong.text
        # Nobody can sign up under the admin's name and so take over the account.
        signup(first, first.admin, "another-Passw0rd")
        assert not logged_in(http_login(first, first.admin, "another-Passw0rd"))
        # A new user signs up, waits for the admin's approval, then logs in.
        assert signup(first, "erin", "erin-Passw0rd-1").status_code == 200
        assert not logged_in(http_login(first, "erin", "erin-Passw0rd-1"))
        admin = requests.Session()
        assert logged_in(http_login(first, first.admin, first.admin_password, admin))
        assert admin.get(first.url + "hub/authorize/erin", timeout=30).status_code == 200
        assert logged_in(http_login(first, "erin", "erin-Passw0rd-1"))
    finally:
        assert stop_hub(first) == []

    # Only the bcrypt hash is stored; the password is in no file of the state folder.
    assert state.stat().st_mode & 0o777 == 0o700
    with sqlite3.connect(state / "jupyterhub.sqlite") as db:
        rows = db.execute("select username, password from users_info").fetchall()
    hashes = dict(rows)
    assert sorted(hashes) == sorted([first.admin, "erin"])
    assert bcrypt.checkpw(first.admin_password.encode(), hashes[first.admin])
    for path in state.rglob("*"):
        if path.is_file():
            assert first.admin_password.encode() not in path.read_bytes(), path

    # A restart on the same state prints no password; the first one still works.
    second = start_hub(state, homes, fresh_ports(env), admin_password=first.admin_password)
    try:
        assert "Admin account created" not in second.log_text()
        assert logged_in(http_login(second, second.admin, first.admin_password))
    finally:
        assert stop_hub(second) == []


def test_mistakes_get_one_line_that_names_the_fix(workdir: Path) -> None:
    env = hub_env(workdir / "state", workdir / "homes")

    missing_proxy = run_main({**env, "ALCHEMIST_HUB_PROXY_CMD": str(workdir / "nope")})
    assert missing_proxy.returncode == 2
    assert missing_proxy.stderr.count("\n") == 1
    assert "scripts/setup.d/10-hub.sh" in missing_proxy.stderr

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        in_use = run_main({**env, "ALCHEMIST_HUB_PORT": port})
    assert in_use.returncode == 2
    assert in_use.stderr.strip() == (
        f"alchemist hub: port {port} on 127.0.0.1 is in use (is a hub already running?):"
        " set ALCHEMIST_HUB_PORT to a free port"
    )

    bad = run_main({**env, "ALCHEMIST_HUB_ISOLATION": "strict"})
    assert bad.returncode == 2
    assert "not one of auto, accounts, single" in bad.stderr
    assert "Traceback" not in bad.stderr + in_use.stderr + missing_proxy.stderr

    if os.geteuid() == 0:
        # The hub never runs a server as an account it did not make.
        clash = run_main({**env, "ALCHEMIST_HUB_ADMIN": "daemon"})
        assert clash.returncode == 2
        assert "'daemon' is an existing system account" in clash.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the check is for a hub run as root")
def test_a_root_hub_refuses_to_run_code_another_account_could_change(workdir: Path) -> None:
    """A root hub imports its config file, this package and the environment's: a file
    or folder other accounts may write (or a hub user owns) would let them run code as
    root. (A file a hub user owns: ``test_embedded_hub_isolation.py``, with real hub
    users.)"""
    import shutil

    from alchemist.hub.embedded import accounts

    env = hub_env(workdir / "state", workdir / "homes")
    packaged = Path(accounts.__file__).with_name("jupyterhub_config.py")
    theirs = workdir / "theirs"
    theirs.mkdir()
    config = theirs / "jupyterhub_config.py"
    shutil.copy(packaged, config)
    for path, mode in ((theirs, 0o777), (theirs, 0o775), (config, 0o666)):
        theirs.chmod(0o755)
        config.chmod(0o644)
        path.chmod(mode)  # a folder or the file itself others (or a group) may write
        refused = run_main({**env, "ALCHEMIST_HUB_CONFIG": str(config)})
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        said = f"{path} can be written by others (mode {mode:o})"
        assert f"other accounts could change code it runs: {said}" in refused.stderr
    # What a root hub runs here (the checkout, the environment) passes the same check.
    assert accounts.changeable_by_others([packaged], [packaged.parent]) == []
    sticky = workdir / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # as /tmp: nobody may replace another's entries
    assert accounts.changeable_by_others([sticky], []) == []


def test_add_user_and_reset_password(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The account commands, run in-process (main() is what the command line calls)."""
    for name, value in hub_env(workdir / "state", workdir / "homes").items():
        monkeypatch.setenv(name, value)

    def manage(*args: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = manage("add-user", "carol")
    assert code == 0, err
    generated = re.search(r"password \(shown once\): (\S+)", out)
    assert generated

    assert manage("add-user", "carol")[2] == (
        "alchemist hub: user 'carol' exists: use reset-password carol\n"
    )
    code, _, err = manage("reset-password", "carol", "--password-stdin", stdin="short\n")
    assert code == 2
    assert "at least 8 characters" in err

    code, out, err = manage("reset-password", "carol", "--password-stdin", stdin="a-new-Passw0rd\n")
    assert code == 0, err
    assert "a-new-Passw0rd" not in out
    with sqlite3.connect(workdir / "state" / "jupyterhub.sqlite") as db:
        (hashed,) = db.execute("select password from users_info where username='carol'").fetchone()
    assert bcrypt.checkpw(b"a-new-Passw0rd", hashed)
    assert not bcrypt.checkpw(generated.group(1).encode(), hashed)

    code, _, err = manage("reset-password", "dave")
    assert (code, err) == (2, "alchemist hub: no user 'dave': use add-user dave\n")
    code, _, err = manage("add-user", "Bad Name")
    assert code == 2
    assert "not a valid user name" in err


def test_examples_are_copied_once_and_never_overwritten(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "data").mkdir(parents=True)
    (source / "01_quickstart.ipynb").write_text("{}")
    (source / "data" / "x.csv").write_text("1,2\n")
    (source / ".ipynb_checkpoints").mkdir()
    (source / ".ipynb_checkpoints" / "01_quickstart-checkpoint.ipynb").write_text("{}")
    home = tmp_path / "home"
    (home / "notebooks").mkdir(parents=True)
    (home / "notebooks" / "01_quickstart.ipynb").write_text("mine")

    assert seed_home(home, source) is True
    assert (home / "notebooks" / "01_quickstart.ipynb").read_text() == "mine"
    assert (home / "notebooks" / "data" / "x.csv").read_text() == "1,2\n"
    assert not (home / "notebooks" / ".ipynb_checkpoints").exists()
    assert (home / MARKER).exists()

    (home / "notebooks" / "data" / "x.csv").unlink()
    assert seed_home(home, source) is False  # deleted examples stay deleted
    assert not (home / "notebooks" / "data" / "x.csv").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only a hub run as root can run servers as root")
def test_single_isolation_as_root_is_refused_unless_allowed(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real ``alchemist-hub start`` command, run as root (as on this project's
    machines): ``single`` isolation would run every user's server as root, so the hub
    refuses in one line naming the fixes; with ``ALCHEMIST_HUB_ALLOW_ROOT_SINGLE=1`` the
    real hub starts and says in one line what that means. Last, the single-account
    spawner itself (for a hand-written hub config that skips the start-up check)
    refuses to start a server as root without the opt-in."""
    state, homes = workdir / "state", workdir / "homes"
    env = {**hub_env(state, homes), "ALCHEMIST_HUB_ISOLATION": "single"}
    command = Path(sys.executable).parent / "alchemist-hub"
    refused = subprocess.run(
        [str(command), "start"], env=env, capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("alchemist hub: ALCHEMIST_HUB_ISOLATION=single")
    assert "every user's server" in refused.stderr
    assert "ALCHEMIST_HUB_ISOLATION=accounts" in refused.stderr
    assert "ordinary user" in refused.stderr
    assert not state.exists()  # refused before anything was set up or started

    bad = run_main({**env, "ALCHEMIST_HUB_ALLOW_ROOT_SINGLE": "yes please"})
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "alchemist hub: ALCHEMIST_HUB_ALLOW_ROOT_SINGLE='yes please' must be 1 (on) or 0 (off)"
    )

    allowed = start_hub(state, homes, {**env, "ALCHEMIST_HUB_ALLOW_ROOT_SINGLE": "1"})
    try:
        log = allowed.log_text()
        assert "isolation: single" in log
        warnings = [line for line in log.splitlines() if "ALLOW_ROOT_SINGLE=1" in line]
        assert len(warnings) == 1 and "run as root" in warnings[0], log
        assert logged_in(http_login(allowed, allowed.admin, allowed.admin_password))
    finally:
        assert stop_hub(allowed) == []

    monkeypatch.delenv("ALCHEMIST_HUB_ALLOW_ROOT_SINGLE", raising=False)
    # In a thread of its own: another test of this folder (Playwright's sync API) may have
    # left an event loop running in this one, where asyncio.run() cannot start another.
    with ThreadPoolExecutor(1) as pool:
        refused = pool.submit(asyncio.run, SingleAccountSpawner().start())
        with pytest.raises(HubConfigError, match="would run every user's server"):
            refused.result(timeout=60)
