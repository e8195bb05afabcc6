"""Start and stop a real embedded hub for the tests: ``python -m alchemist.hub.embedded`` with its own state.

The hub runs exactly as the README's first command starts it (real JupyterHub, real
configurable-http-proxy from ``.cache/node``, real single-user JupyterLab servers), on
free ports, with its state and the users' homes in temporary folders. Run as root (as on
this project's machines) it makes real system accounts; the fixture deletes them again
and fails the tests if any process of theirs is left behind.
"""

from __future__ import annotations

import os
import pwd
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import requests

from alchemist.hub.embedded.accounts import is_hub_account, remove_system_account

#: The checkout these tests run from (its .cache/node holds the proxy setup.d/10-hub.sh
#: installs).
REPO_ROOT = Path(__file__).resolve().parents[2]
PROXY = REPO_ROOT / ".cache" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: str, check, timeout: float, interval: float = 0.2):  # type: ignore[no-untyped-def]
    """Poll ``check()`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass
class RunningHub:
    """A started hub: where it answers, its admin and password, its folders and process."""

    url: str
    admin: str
    admin_password: str
    hub_dir: Path
    home_base: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    log: Path
    users: list[str] = field(default_factory=list)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def manage(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``python -m alchemist.hub.embedded ARGS`` against this hub's state."""
        return subprocess.run(
            [sys.executable, "-m", "alchemist.hub.embedded", *args],
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def add_user(self, name: str, password: str) -> None:
        done = self.manage("add-user", name, "--password-stdin", stdin=password + "\n")
        assert done.returncode == 0, done.stderr
        self.users.append(name)

    def user_home(self, name: str) -> Path:
        if os.geteuid() == 0:
            return Path(pwd.getpwnam(name).pw_dir)
        return self.hub_dir / "homes" / name


def fresh_ports(env: dict[str, str]) -> dict[str, str]:
    """``env`` with new free ports for the proxy, the hub API and the proxy API."""
    return {
        **env,
        "ALCHEMIST_HUB_PORT": str(free_port()),
        "ALCHEMIST_HUB_API_PORT": str(free_port()),
        "ALCHEMIST_HUB_PROXY_PORT": str(free_port()),
    }


def hub_env(hub_dir: Path, home_base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ALCHEMIST_", "JUPYTER"))}
    env.update(
        ALCHEMIST_HUB_DIR=str(hub_dir),
        ALCHEMIST_HUB_HOME_BASE=str(home_base),
        ALCHEMIST_HUB_PORT=str(free_port()),
        ALCHEMIST_HUB_API_PORT=str(free_port()),
        ALCHEMIST_HUB_PROXY_PORT=str(free_port()),
        ALCHEMIST_HUB_ADMIN=f"hubadmin-{uuid.uuid4().hex[:6]}",
        ALCHEMIST_HUB_PROXY_CMD=str(PROXY),
    )
    return env


def start_hub(
    hub_dir: Path, home_base: Path, env: dict[str, str], *, admin_password: str | None = None
) -> RunningHub:
    """Start ``python -m alchemist.hub.embedded`` and wait until the hub answers.

    Args:
        admin_password: None on a first start (the printed password is read from the
            output); on a restart, the password printed before (none may be printed).
    """
    log = hub_dir.parent / f"{hub_dir.name}-{env['ALCHEMIST_HUB_PORT']}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "alchemist.hub.embedded"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{env['ALCHEMIST_HUB_PORT']}/"

    def ready() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"hub exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            return requests.get(url + "hub/api/", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    wait_until("the hub to answer", ready, timeout=60)
    # The output is a file, not a terminal: the first start's password is in the file
    # the banner names, never in the log.
    said = re.search(r"its password is in (\S+)\n", log.read_text())
    if admin_password is None:
        assert said, f"no admin account created:\n{log.read_text()}"
        admin_password = Path(said.group(1)).read_text().strip()
        assert admin_password and admin_password not in log.read_text()
    else:
        assert said is None, "a restart created the admin account again"
    return RunningHub(
        url=url,
        admin=env["ALCHEMIST_HUB_ADMIN"],
        admin_password=admin_password,
        hub_dir=hub_dir,
        home_base=home_base,
        env=env,
        proc=proc,
        log=log,
        users=[env["ALCHEMIST_HUB_ADMIN"]],
    )


def stop_hub(hub: RunningHub) -> list[str]:
    """Stop the hub like Ctrl-C would; return descriptions of processes left behind."""
    user_procs = [p for p in psutil.Process(hub.proc.pid).children(recursive=True)]
    if hub.proc.poll() is None:
        hub.proc.send_signal(signal.SIGTERM)
        try:
            hub.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(hub.proc.pid, signal.SIGKILL)
            hub.proc.wait(timeout=10)
    # Anything the hub started (proxy, servers, kernels) must be gone with it.
    _, alive = psutil.wait_procs(user_procs, timeout=15)
    owners = set(hub.users)
    for proc in psutil.process_iter(["username"]):
        if proc.info["username"] in owners and proc not in alive:
            alive.append(proc)
    left = []
    for proc in alive:
        try:
            left.append(" ".join(proc.cmdline()[:4]))
            proc.kill()
        except psutil.Error:
            continue
    return left


def remove_accounts(home_base: Path) -> None:
    """Delete the system accounts the hub made under ``home_base`` (tests only)."""
    for entry in pwd.getpwall():
        if is_hub_account(entry) and Path(entry.pw_dir).parent == home_base:
            remove_system_account(entry.pw_name)
