"""The embedded hub's JupyterHub configuration, applied by the packaged ``jupyterhub_config.py``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from alchemist.hub.embedded.settings import USERNAME_PATTERN, HubSettings


def configure(c: Any, settings: HubSettings | None = None) -> HubSettings:
    """Fill the traitlets config ``c`` of a JupyterHub for the embedded hub.

    Args:
        c: the config object of ``jupyterhub_config.py`` (``get_config()``).
        settings: default :meth:`HubSettings.from_env`.

    Returns:
        The settings used.
    """
    s = settings or HubSettings.from_env()
    s.hub_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    # Network: the public proxy on ip:port (127.0.0.1 unless configured), the hub API and
    # the proxy API on loopback only.
    c.JupyterHub.bind_url = f"http://{s.ip}:{s.port}/"
    c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{s.api_port}"
    c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{s.proxy_api_port}"
    c.ConfigurableHTTPProxy.command = [s.proxy_cmd]
    c.ConfigurableHTTPProxy.should_start = True

    # State: only under the hub directory (git-ignored), never in the repository.
    c.JupyterHub.db_url = s.db_url
    c.JupyterHub.cookie_secret_file = str(s.cookie_secret_file)
    c.JupyterHub.pid_file = str(s.hub_dir / "jupyterhub.pid")
    # Stop the proxy and user servers with the hub: a stopped hub leaves nothing behind.
    c.JupyterHub.cleanup_servers = True
    c.JupyterHub.cleanup_proxy = True

    # Authentication: NativeAuthenticator (bcrypt hashes in the hub DB); sign-ups wait
    # for an admin's approval. allow_all admits whoever NativeAuthenticator
    # authenticated, i.e. approved users with the right password (JupyterHub >= 5
    # otherwise admits nobody but admins).
    c.JupyterHub.authenticator_class = "alchemist.hub.embedded.auth.AlchemistAuthenticator"
    c.JupyterHub.template_paths = [str(Path(__file__).resolve().parent / "templates")]
    c.Authenticator.admin_users = {s.admin}
    c.AlchemistAuthenticator.create_admin = s.admin
    c.AlchemistAuthenticator.admin_password_file = str(s.hub_dir / "admin-password")
    c.Authenticator.allow_all = True
    c.Authenticator.username_pattern = USERNAME_PATTERN
    c.AlchemistAuthenticator.system_accounts = s.isolation == "accounts"
    c.NativeAuthenticator.open_signup = False
    c.NativeAuthenticator.minimum_password_length = 8
    c.NativeAuthenticator.check_common_password = True
    c.NativeAuthenticator.allowed_failed_logins = 5
    c.NativeAuthenticator.seconds_before_next_try = 60

    # Spawning: JupyterLab from this Python environment.
    c.Spawner.cmd = [str(Path(sys.executable).parent / "jupyterhub-singleuser")]
    c.Spawner.default_url = "/lab"
    # The machine may be busy (2 cores shared): give the server time to come up.
    c.Spawner.start_timeout = 120
    c.Spawner.http_timeout = 120
    examples = str(s.notebooks) if s.notebooks.is_dir() else ""
    if s.isolation == "accounts":
        c.JupyterHub.spawner_class = "alchemist.hub.embedded.spawner.AccountSpawner"
        c.AccountSpawner.home_base = str(s.home_base)
        c.AccountSpawner.examples_dir = examples
    else:
        c.JupyterHub.spawner_class = "alchemist.hub.embedded.spawner.SingleAccountSpawner"
        c.SingleAccountSpawner.home_dir_template = str(s.hub_dir / "homes" / "{username}")
        c.SingleAccountSpawner.examples_dir = examples
        if os.geteuid() == 0:
            # A single-account hub run as root runs servers as root.
            c.Spawner.args = ["--allow-root"]
    return s
