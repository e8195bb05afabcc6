"""Settings of the embedded hub, read from the environment.

The entry point (``alchemist-hub``, ``python -m alchemist.hub.embedded``) and the packaged
``jupyterhub_config.py`` read the same variables, so a hub started either way behaves the same:

=============================  ===========================================================
variable                       meaning (default)
=============================  ===========================================================
``ALCHEMIST_HUB_DIR``          hub state: database, cookie secret (``./.alchemist/hub``)
``ALCHEMIST_HUB_IP``           address the public proxy binds (``127.0.0.1``)
``ALCHEMIST_HUB_PORT``         public port (``8000``)
``ALCHEMIST_HUB_API_PORT``     the hub's internal API port on 127.0.0.1 (``8081``)
``ALCHEMIST_HUB_PROXY_PORT``   the proxy's internal API port on 127.0.0.1 (``8001``)
``ALCHEMIST_HUB_ADMIN``        name of the admin account made on first start (``admin``)
``ALCHEMIST_HUB_ISOLATION``    ``accounts`` (one system account per user; needs root),
                               ``single`` (every server runs as the hub's own account), or
                               ``auto``: ``accounts`` when root, else ``single`` (``auto``).
                               A hub run as root refuses ``single`` (every server would
                               run as root) unless ``ALCHEMIST_HUB_ALLOW_ROOT_SINGLE=1``
``ALCHEMIST_HUB_HOME_BASE``    where ``accounts`` mode makes homes (``/home``); in
                               ``single`` mode homes are ``<hub dir>/homes/<user>``
``ALCHEMIST_HUB_NOTEBOOKS``    example notebooks copied into each new home (the ones
                               the wheel ships in ``alchemist/notebooks``; in a checkout,
                               its ``notebooks/``)
``ALCHEMIST_HUB_PROXY_CMD``    the configurable-http-proxy program (the one on ``PATH``;
                               in a checkout, first its
                               ``.cache/node/node_modules/.bin/configurable-http-proxy``)
=============================  ===========================================================
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

from alchemist.errors import HubConfigError

Isolation = Literal["accounts", "single"]


#: Development fallback only: the checkout this module runs from when Alchemist is
#: installed editable (``pyproject.toml`` at its top), else None. An installed wheel
#: finds everything as package data or on ``PATH``; only a checkout, where the example
#: notebooks and the proxy that scripts/setup.d/10-hub.sh installs sit beside the
#: package, looks here.
def _checkout_root() -> Path | None:
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").is_file() else None


CHECKOUT_ROOT = _checkout_root()

#: GECOS comment of the system accounts the hub creates; the hub only ever runs servers
#: as accounts that carry it, never as a pre-existing account such as ``root``.
ACCOUNT_MARKER = "alchemist hub user"
#: GECOS comment of a hub-made account whose hub user was deleted: locked, its
#: processes ended, its files kept, and its name taken by no one until an administrator
#: releases it (``alchemist-hub release-name``).
RETIRED_MARKER = "alchemist hub user (deleted)"

#: Hub user names that are also valid, portable Unix login names (useradd's rules).
USERNAME_PATTERN = r"^[a-z][a-z0-9_-]{0,30}$"


@dataclass(frozen=True)
class HubSettings:
    """Everything the embedded hub needs to know, resolved to absolute values."""

    hub_dir: Path
    ip: str
    port: int
    api_port: int
    proxy_api_port: int
    admin: str
    isolation: Isolation
    home_base: Path
    notebooks: Path
    proxy_cmd: str
    allow_root_single: bool = False

    @property
    def servers_run_as_root(self) -> bool:
        """Whether every user's server runs as root (``single`` isolation, hub as root)."""
        return self.isolation == "single" and os.geteuid() == 0

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.hub_dir / 'jupyterhub.sqlite'}"

    @property
    def cookie_secret_file(self) -> Path:
        return self.hub_dir / "jupyterhub_cookie_secret"

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.ip in ("", "0.0.0.0") else self.ip
        return f"http://{host}:{self.port}/"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HubSettings:
        """Read the settings from ``env`` (default ``os.environ``).

        Raises:
            HubConfigError: a variable has a bad value, ``accounts`` isolation is asked
                for without root, or ``single`` isolation as root without
                ``ALCHEMIST_HUB_ALLOW_ROOT_SINGLE=1``.
        """
        env = os.environ if env is None else env
        hub_dir = Path(env.get("ALCHEMIST_HUB_DIR") or Path.cwd() / ".alchemist" / "hub")
        isolation = _isolation(env.get("ALCHEMIST_HUB_ISOLATION", "auto"))
        allow_root_single = root_single_allowed(env)
        if isolation == "single" and os.geteuid() == 0 and not allow_root_single:
            raise HubConfigError(ROOT_SINGLE_REFUSED)
        admin = env.get("ALCHEMIST_HUB_ADMIN", "admin")
        if not re.match(USERNAME_PATTERN, admin):
            raise HubConfigError(
                f"ALCHEMIST_HUB_ADMIN={admin!r} is not a valid user name: use lower-case"
                " letters, digits, '-' or '_', starting with a letter"
            )
        return cls(
            hub_dir=hub_dir.expanduser().resolve(),
            ip=env.get("ALCHEMIST_HUB_IP", "127.0.0.1"),
            port=_port(env, "ALCHEMIST_HUB_PORT", 8000),
            api_port=_port(env, "ALCHEMIST_HUB_API_PORT", 8081),
            proxy_api_port=_port(env, "ALCHEMIST_HUB_PROXY_PORT", 8001),
            admin=admin,
            isolation=isolation,
            home_base=Path(env.get("ALCHEMIST_HUB_HOME_BASE") or "/home").resolve(),
            notebooks=Path(env.get("ALCHEMIST_HUB_NOTEBOOKS") or default_notebooks()),
            proxy_cmd=env.get("ALCHEMIST_HUB_PROXY_CMD") or _default_proxy_cmd(),
            allow_root_single=allow_root_single,
        )

    def to_env(self) -> dict[str, str]:
        """The variables that make :meth:`from_env` return these settings."""
        return {
            "ALCHEMIST_HUB_DIR": str(self.hub_dir),
            "ALCHEMIST_HUB_IP": self.ip,
            "ALCHEMIST_HUB_PORT": str(self.port),
            "ALCHEMIST_HUB_API_PORT": str(self.api_port),
            "ALCHEMIST_HUB_PROXY_PORT": str(self.proxy_api_port),
            "ALCHEMIST_HUB_ADMIN": self.admin,
            "ALCHEMIST_HUB_ISOLATION": self.isolation,
            "ALCHEMIST_HUB_HOME_BASE": str(self.home_base),
            "ALCHEMIST_HUB_NOTEBOOKS": str(self.notebooks),
            "ALCHEMIST_HUB_PROXY_CMD": self.proxy_cmd,
            ALLOW_ROOT_SINGLE: "1" if self.allow_root_single else "",
        }


#: The opt-in that lets a hub run as root use ``single`` isolation.
ALLOW_ROOT_SINGLE = "ALCHEMIST_HUB_ALLOW_ROOT_SINGLE"

#: Why a hub run as root refuses ``single`` isolation, and the fixes (one line).
ROOT_SINGLE_REFUSED = (
    "ALCHEMIST_HUB_ISOLATION=single with the hub run as root would run every user's"
    " server, kernels and jobs as root: use ALCHEMIST_HUB_ISOLATION=accounts (a system"
    " account per user), or run the hub as an ordinary user"
    f" (or set {ALLOW_ROOT_SINGLE}=1 to accept it)"
)


def root_single_allowed(env: Mapping[str, str]) -> bool:
    """Whether ``env`` opts in to ``single`` isolation as root.

    Raises:
        HubConfigError: the variable is neither on (``1``) nor off (``0`` or empty).
    """
    raw = env.get(ALLOW_ROOT_SINGLE, "").strip()
    if raw in ("", "0"):
        return False
    if raw == "1":
        return True
    raise HubConfigError(f"{ALLOW_ROOT_SINGLE}={raw!r} must be 1 (on) or 0 (off)")


def _isolation(raw: str) -> Isolation:
    is_root = os.geteuid() == 0
    if raw == "auto":
        return "accounts" if is_root else "single"
    if raw == "accounts":
        if not is_root:
            raise HubConfigError(
                "ALCHEMIST_HUB_ISOLATION=accounts needs a hub running as root"
                " (to create accounts and start servers as them): run it as root,"
                " or use ALCHEMIST_HUB_ISOLATION=single"
            )
        return "accounts"
    if raw == "single":
        return "single"
    raise HubConfigError(f"ALCHEMIST_HUB_ISOLATION={raw!r} is not one of auto, accounts, single")


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if not raw:
        return default
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise HubConfigError(f"{name}={raw!r} is not a port number (1-65535)")
    return port


def default_notebooks() -> Path:
    """The example notebooks a new home gets when ``ALCHEMIST_HUB_NOTEBOOKS`` is unset.

    Returns:
        The wheel's packaged ``alchemist/notebooks``; in an editable checkout (which has
        no packaged copy) the checkout's ``notebooks/``. The path may not exist (a wheel
        built without them): the hub then seeds no examples.
    """
    packaged = Path(str(resources.files("alchemist").joinpath("notebooks")))
    if packaged.is_dir() or CHECKOUT_ROOT is None:
        return packaged
    return CHECKOUT_ROOT / "notebooks"  # development fallback


def _default_proxy_cmd() -> str:
    on_path = shutil.which("configurable-http-proxy")
    if CHECKOUT_ROOT is None:
        return on_path or "configurable-http-proxy"
    # Development fallback: the proxy scripts/setup.d/10-hub.sh installs in the checkout.
    local = CHECKOUT_ROOT / ".cache" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
    if local.exists():
        return str(local)
    return on_path or str(local)
