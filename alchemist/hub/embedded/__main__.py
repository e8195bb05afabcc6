"""``alchemist-hub`` (or ``python -m alchemist.hub.embedded``): start the embedded hub, or
manage its accounts.

::

    alchemist-hub [start] [JUPYTERHUB_ARGS...]
    alchemist-hub add-user NAME [--password-stdin]
    alchemist-hub reset-password NAME [--password-stdin]
    alchemist-hub release-name NAME

``start`` prepares the state directory, creates the admin account on the first start
and prints its generated password (once: only a hash is stored), then replaces itself
with ``jupyterhub -f <the packaged jupyterhub_config.py>`` (or
``$ALCHEMIST_HUB_CONFIG``). ``add-user`` and ``reset-password``
print a generated password unless one is piped in; they work while the hub runs.
``release-name`` deletes the system account a deleted hub user left (locked, kept so
that nobody who signs up later under that name gets its files and jobs) and its home,
and frees the name.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import socket
import sys
from importlib import resources
from pathlib import Path

from alchemist.errors import HubConfigError
from alchemist.hub.embedded.accounts import (
    check_account_name_free,
    check_code_is_roots,
    closed_dirs,
    generate_password,
    has_password,
    open_hub_db,
    release_name,
    set_password,
)
from alchemist.hub.embedded.settings import USERNAME_PATTERN, HubSettings


def config_file() -> Path:
    """The JupyterHub config file the hub runs with.

    Returns:
        ``$ALCHEMIST_HUB_CONFIG`` when set, else the ``jupyterhub_config.py`` shipped in
        this package (found through :mod:`importlib.resources`, so an installed wheel
        and an editable checkout find it the same way).

    Raises:
        HubConfigError: the file does not exist.
    """
    configured = os.environ.get("ALCHEMIST_HUB_CONFIG")
    if configured:
        path = Path(configured)
    else:
        path = Path(str(resources.files("alchemist.hub.embedded").joinpath("jupyterhub_config.py")))
    if not path.is_file():
        raise HubConfigError(
            f"no hub config at {path}: unset ALCHEMIST_HUB_CONFIG to use the packaged one,"
            " or point it at a jupyterhub_config.py"
        )
    return path.resolve()


def check_port_free(ip: str, port: int, variable: str) -> None:
    """Raise a one-line error naming ``variable`` when ``ip:port`` cannot be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError as e:
            why = (
                "is in use (is a hub already running?)"
                if e.errno == errno.EADDRINUSE
                else f"cannot be bound ({e.strerror})"
            )
            raise HubConfigError(f"port {port} on {ip} {why}: set {variable} to a free port") from e


def prepare(settings: HubSettings) -> None:
    """Check the setup and create the state directory.

    The admin account is created by the hub itself (see
    :class:`~alchemist.hub.embedded.auth.AlchemistAuthenticator`), which prints its password.

    Raises:
        HubConfigError: something is missing or clashes; the message names the fix.
    """
    proxy = Path(settings.proxy_cmd)
    if not (proxy.is_file() and os.access(proxy, os.X_OK)):
        raise HubConfigError(
            f"configurable-http-proxy not found at {proxy}: in a checkout run scripts/setup.sh"
            " (or bash scripts/setup.d/10-hub.sh); elsewhere install it with npm"
            " (npm install -g configurable-http-proxy) or set ALCHEMIST_HUB_PROXY_CMD"
        )
    check_port_free(settings.ip, settings.port, "ALCHEMIST_HUB_PORT")
    check_port_free("127.0.0.1", settings.api_port, "ALCHEMIST_HUB_API_PORT")
    check_port_free("127.0.0.1", settings.proxy_api_port, "ALCHEMIST_HUB_PROXY_PORT")
    settings.hub_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(settings.hub_dir, 0o700)
    if settings.isolation == "accounts":
        closed = closed_dirs(Path(sys.executable))
        if closed:
            dirs = " ".join(str(d) for d in closed)
            raise HubConfigError(
                f"users' servers cannot run this Python ({os.path.realpath(sys.executable)}):"
                f" other accounts may not enter {dirs}; run scripts/setup.d/10-hub.sh as root"
                f" (it runs chmod o+x {dirs}), or set ALCHEMIST_HUB_ISOLATION=single"
            )
        settings.home_base.mkdir(parents=True, exist_ok=True)
        os.chmod(settings.home_base, os.stat(settings.home_base).st_mode | 0o755)
        check_account_name_free(settings.admin)
        if "ALCHEMIST_ADMISSION_DIR" not in os.environ:
            from alchemist.backends.local.admission import prepare_machine_queue

            prepare_machine_queue()  # root's, 1777: no user's first job owns it


def start(settings: HubSettings, hub_args: list[str]) -> None:
    """Prepare, print the URL (and the admin password on the first start), exec the hub."""
    config = config_file()
    if os.geteuid() == 0:
        check_code_is_roots(config)
    prepare(settings)
    print(
        f"Alchemist hub: {settings.url}"
        f"  (state in {settings.hub_dir}, isolation: {settings.isolation})",
        flush=True,
    )
    if settings.servers_run_as_root:  # allowed explicitly: say so, in one line
        print(
            "alchemist hub: warning: isolation single as root (ALCHEMIST_HUB_ALLOW_ROOT_SINGLE=1):"
            " every user's server, kernels and jobs run as root, and no user is kept from another",
            file=sys.stderr,
            flush=True,
        )
    env = {**os.environ, **settings.to_env()}
    argv = [sys.executable, "-m", "jupyterhub", "-f", str(config), *hub_args]
    os.chdir(settings.hub_dir)  # the proxy's pid file and any stray state land here
    os.execve(sys.executable, argv, env)


def _read_password(from_stdin: bool) -> tuple[str, bool]:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n"), False
    return generate_password(), True


def set_user_password(settings: HubSettings, name: str, from_stdin: bool, *, create: bool) -> None:
    if not re.match(USERNAME_PATTERN, name):
        raise HubConfigError(
            f"{name!r} is not a valid user name: use lower-case letters, digits, '-' or '_',"
            " starting with a letter"
        )
    if settings.isolation == "accounts":
        check_account_name_free(name)
    db = open_hub_db(settings)
    try:
        exists = has_password(db, name)
        if create and exists:
            raise HubConfigError(f"user {name!r} exists: use reset-password {name}")
        if not create and not exists:
            raise HubConfigError(f"no user {name!r}: use add-user {name}")
        password, generated = _read_password(from_stdin)
        set_password(db, name, password)
    finally:
        db.close()
    verb = "created" if create else "password reset for"
    if generated:
        print(f"user {name!r} {verb}; password (shown once): {password}")
    else:
        print(f"user {name!r} {verb}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0
    try:
        settings = HubSettings.from_env()
        if args and args[0] in ("add-user", "reset-password"):
            parser = argparse.ArgumentParser(prog=f"alchemist-hub {args[0]}")
            parser.add_argument("name")
            parser.add_argument(
                "--password-stdin", action="store_true", help="read the password from stdin"
            )
            ns = parser.parse_args(args[1:])
            set_user_password(settings, ns.name, ns.password_stdin, create=args[0] == "add-user")
            return 0
        if args and args[0] == "release-name":
            parser = argparse.ArgumentParser(prog="alchemist-hub release-name")
            parser.add_argument("name")
            ns = parser.parse_args(args[1:])
            home = release_name(ns.name)
            print(f"deleted the account of deleted hub user {ns.name!r} and its home {home}")
            return 0
        if args and args[0] == "start":
            args = args[1:]
        start(settings, args)
    except HubConfigError as e:
        print(f"alchemist hub: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
