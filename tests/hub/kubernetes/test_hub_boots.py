"""The chart's hub configuration boots a real JupyterHub.

A real ``jupyterhub`` process runs the chart's rendered ``jupyterhub_config.py`` (which
calls ``alchemist.hub.kubernetes.configure_from_file`` on the rendered hub config), with a real
configurable-http-proxy (npm) running apart as the chart's proxy Deployment does. Only
the addresses are changed to 127.0.0.1 and free ports, and the database to SQLite in
memory. KubeSpawner is configured but spawns nothing here (no API server can run on
this machine; spawning is covered against a stand-in in test_kubespawner_lifecycle.py).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tests.support.chart import REPO, find, render

CHP = REPO / ".cache" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
DEADLINE_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def process(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> Iterator[None]:
    """Run ``argv`` in its own process group; end the group (and wait) on exit."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_for(url: str, log: Path) -> tuple[int, str]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            status, body = get(url)
            if status == 200:
                return status, body
        except OSError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(
                f"{url} did not answer 200 in {DEADLINE_S:.0f} s:\n{log.read_text()[-3000:]}"
            )
        time.sleep(0.2)


def test_rendered_hub_config_boots_jupyterhub_behind_its_proxy(
    helm: str, kubeconfig: Path, tmp_path: Path
) -> None:
    if not CHP.exists():
        pytest.skip("configurable-http-proxy is not installed: run scripts/setup.sh")
    docs = render(helm, sets=["hub.db.type=sqlite-memory", "hub.adminUsers={admin}"])
    (cm,) = find(docs, "ConfigMap", "-hub-config")
    hub_port, proxy_port, api_port = free_port(), free_port(), free_port()
    config = yaml.safe_load(cm["data"]["hub-config.yaml"])
    config["hub"].update(
        bindUrl=f"http://127.0.0.1:{hub_port}",
        connectUrl=f"http://127.0.0.1:{hub_port}",
        proxyApiUrl=f"http://127.0.0.1:{api_port}",
    )
    (tmp_path / "hub-config.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "jupyterhub_config.py").write_text(
        cm["data"]["jupyterhub_config.py"].replace(
            "/usr/local/etc/alchemist/hub-config.yaml", str(tmp_path / "hub-config.yaml")
        )
    )
    env = {
        **os.environ,
        "CONFIGPROXY_AUTH_TOKEN": "test-proxy-token",
        "ALCHEMIST_HUB_COOKIE_SECRET": "test-cookie-secret",
    }
    chp = [
        str(CHP),
        "--ip",
        "127.0.0.1",
        "--port",
        str(proxy_port),
        "--api-ip",
        "127.0.0.1",
        "--api-port",
        str(api_port),
        "--default-target",
        f"http://127.0.0.1:{hub_port}",
    ]
    hub = [sys.executable, "-m", "jupyterhub", "--config", str(tmp_path / "jupyterhub_config.py")]
    with (
        process(chp, env, tmp_path, tmp_path / "proxy.log"),
        process(hub, env, tmp_path, tmp_path / "hub.log"),
    ):
        public = f"http://127.0.0.1:{proxy_port}"
        wait_for(f"{public}/hub/health", tmp_path / "hub.log")
        # Through the proxy: NativeAuthenticator's login page, with its sign-up link.
        status, body = get(f"{public}/hub/login")
        assert status == 200
        assert "/hub/signup" in body
        status, body = get(f"{public}/hub/signup")
        assert status == 200 and "password" in body.lower()
    log = (tmp_path / "hub.log").read_text()
    assert "KubeSpawner" in log or "kubespawner" in log.lower(), log[-2000:]
    # The chart's authenticator made the admin account before serving (auth.py), so a
    # sign-up as "admin" finds the name taken (test_cluster_auth.py).
    assert "Admin account created:  user 'admin'" in log, log[-2000:]
