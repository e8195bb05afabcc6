"""Fixtures of the embedded-hub tests: a real hub per module, headless Chromium."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.hubproc import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PROXY,
    RunningHub,
    hub_env,
    remove_accounts,
    start_hub,
    stop_hub,
)


@pytest.fixture(scope="session")
def hub() -> Iterator[RunningHub]:
    """One embedded hub for the browser and isolation tests (each user has a server)."""
    if not PROXY.exists():
        pytest.fail("configurable-http-proxy is missing: run bash scripts/setup.d/10-hub.sh")
    tmp = Path(tempfile.mkdtemp(prefix="alchemist-hub-test-"))
    hub_dir = tmp / "state"
    # Homes of system accounts must be reachable by those accounts: not under pytest's
    # root-only tmp folder.
    home_base = tmp / "homes"
    home_base.mkdir()
    os.chmod(tmp, 0o755)
    os.chmod(home_base, 0o755)
    env = hub_env(hub_dir, home_base)
    running = start_hub(hub_dir, home_base, env)
    try:
        yield running
    finally:
        left = stop_hub(running)
        if os.geteuid() == 0:
            remove_accounts(home_base)
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
        if left:
            pytest.fail(f"the hub left {len(left)} process(es) behind: {left}")


@pytest.fixture(scope="session")
def chromium() -> Iterator[object]:
    """Headless system Chromium driven by Playwright."""
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium: run scripts/setup.d/20-browser.sh")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
