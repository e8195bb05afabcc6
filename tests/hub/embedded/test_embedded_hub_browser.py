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

from alchemist.store import JobStore
from tests.support.hubproc import RunningHub, wait_until

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

        # The examples were copied into the user's home, owned by the user.
        quickstart = home / "notebooks" / QUICKSTART
        assert quickstart.exists()
        if os.geteuid() == 0:
            assert quickstart.stat().st_uid == pwd.getpwnam(hub.admin).pw_uid

        run_quickstart(page, hub)
        # The job is in this user's own job store, and it succeeded.
        store = JobStore(f"sqlite:///{home / '.alchemist' / 'jobs.sqlite'}")
        jobs = store.list(owner=hub.admin)
        assert [(j.name, j.state) for j in jobs] == [("quickstart", "succeeded")]
    finally:
        context.close()


def run_quickstart(page: Any, hub: RunningHub) -> None:
    """Open the quickstart, run all its cells, and see the distributed job succeed."""
    page.goto(hub.url + f"user/{hub.admin}/lab/tree/notebooks/{QUICKSTART}")
    # The hub's kernel spec (which loads the alchemist extension) runs the notebook.
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    page.wait_for_selector(".jp-Toolbar-kernelName:has-text('Python 3 (Alchemist)')")
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
    # The distributed cell copies rank 0's weights back when its job has succeeded; the
    # next cell prints their accuracy; the last lists the job.
    page.wait_for_selector("text=copied back from rank 0: weights", timeout=300_000)
    page.wait_for_selector("text=test accuracy (distributed, 2 processes)", timeout=60_000)
    last = page.locator(".jp-Notebook .jp-CodeCell").last
    last.locator(".jp-OutputArea-output").first.wait_for(timeout=60_000)
    assert "succeeded" in last.inner_text()
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']")
    assert errors.count() == 0, errors.all_inner_texts()
