"""End to end through the embedded hub, in headless Chromium.

A user opens the hub's login page, is refused with a wrong password, logs in with the
admin password the first start printed, gets JupyterLab in their own server (running as
their own system account when the hub runs as root, with their own ALCHEMIST_HOME and
the example notebooks in their home), opens the quickstart notebook and runs its
distributed cell on the local backend.
"""

from __future__ import annotations

import os
import pwd
from typing import Any

import psutil
import pytest

from tests.hub.hubproc import RunningHub, wait_until

pytestmark = pytest.mark.browser

QUICKSTART = "01_quickstart.ipynb"


def login(page: Any, hub: RunningHub, user: str, password: str) -> None:
    page.goto(hub.url + "hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", password)
    page.click("#login_submit")


def server_process(user: str) -> psutil.Process | None:
    """The user's single-user server process, once it runs."""
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            env = proc.info["environ"] or {}
        except psutil.Error:
            continue
        if "jupyterhub-singleuser" in cmd and env.get("JUPYTERHUB_USER") == user:
            return proc
    return None


def test_wrong_password_is_refused(hub: RunningHub, chromium: Any) -> None:
    context = chromium.new_context()
    try:
        page = context.new_page()
        login(page, hub, hub.admin, hub.admin_password + "-wrong")
        page.wait_for_selector("text=Invalid username or password", timeout=30_000)
        assert "/hub/login" in page.url
        # Not logged in: the hub still sends us to the login page.
        page.goto(hub.url + "hub/home")
        page.wait_for_url("**/hub/login**", timeout=30_000)
        assert server_process(hub.admin) is None
    finally:
        context.close()


def test_login_spawns_lab_with_alchemist_and_runs_quickstart(
    hub: RunningHub, chromium: Any
) -> None:
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(120_000)
        login(page, hub, hub.admin, hub.admin_password)
        page.wait_for_url(f"**/user/{hub.admin}/lab**")
        page.wait_for_selector("#jp-main-dock-panel")

        proc = wait_until("the user's server process", lambda: server_process(hub.admin), 30)
        home = hub.user_home(hub.admin)
        env = proc.environ()
        assert env["ALCHEMIST_HOME"] == str(home / ".alchemist")
        assert env["HOME"] == str(home)
        if os.geteuid() == 0:
            # Isolation by the OS: the server runs as the user's own account, home 0700.
            assert proc.username() == hub.admin
            assert pwd.getpwnam(hub.admin).pw_dir == str(home)
            assert home.stat().st_mode & 0o777 == 0o700

        quickstart = home / "notebooks" / QUICKSTART
        if not quickstart.exists():
            pytest.skip(f"no notebooks/{QUICKSTART} in the repository yet")
        run_quickstart(page, hub)
    finally:
        context.close()


def run_quickstart(page: Any, hub: RunningHub) -> None:
    """Open the quickstart, run every cell, and see the distributed job succeed."""
    page.goto(hub.url + f"user/{hub.admin}/lab/tree/notebooks/{QUICKSTART}?reset")
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    page.click(".jp-Notebook")
    page.keyboard.press("Escape")
    page.click("text=Run", exact=True)
    page.click("text=Run All Cells")
    page.wait_for_selector("text=succeeded", timeout=240_000)
