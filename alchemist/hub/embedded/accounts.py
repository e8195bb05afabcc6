"""Hub accounts (passwords in the hub database) and the system accounts behind them.

Passwords are checked by jupyterhub-nativeauthenticator, which keeps one bcrypt hash per
user in the hub's own SQLite database (table ``users_info``); nothing else stores a
password. The functions here write that same table, so an admin made here logs in
through the ordinary login page.

In ``accounts`` isolation (a hub running as root) each hub user also gets a system
account of the same name, made by ``useradd`` on the first spawn, and their server runs
as it. Only accounts the hub made (GECOS comment :data:`ACCOUNT_MARKER`) are ever used:
a hub user called ``root`` or ``daemon`` is refused, never mapped onto that account.

When an admin deletes a hub user, their account is retired (:func:`retire_system_account`):
every process of it ends (its server, kernels, jobs and warm pool), the account is locked
and marked :data:`RETIRED_MARKER`, and its home is kept. A retired name is refused to
anyone who signs up or is added later, who would otherwise spawn as the old account,
with its files and running jobs; ``alchemist-hub release-name NAME`` deletes the old
account and its home, and frees the name.
"""

from __future__ import annotations

import os
import pwd
import secrets
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import bcrypt

from alchemist.errors import HubConfigError
from alchemist.hub.embedded.settings import ACCOUNT_MARKER, RETIRED_MARKER, HubSettings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

#: Shortest password :func:`set_password` accepts (NativeAuthenticator's default too).
MIN_PASSWORD_LENGTH = 8


def open_hub_db(settings: HubSettings) -> Session:
    """Open (creating if needed) the hub database, with NativeAuthenticator's table.

    The tables are created by JupyterHub's own ORM, which also stamps the schema
    revision, so the hub that starts on this file afterwards finds it current.
    """
    from jupyterhub import orm
    from nativeauthenticator.orm import UserInfo  # registers users_info on orm.Base

    settings.hub_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    session: Session = orm.new_session_factory(settings.db_url)()
    UserInfo.__table__.create(session.get_bind(), checkfirst=True)
    return session


def generate_password() -> str:
    """A random password for people to type: 16 URL-safe characters (96 bits)."""
    return secrets.token_urlsafe(12)


def has_password(db: Session, username: str) -> bool:
    """Whether ``username`` has a password (and so can log in once authorized)."""
    from nativeauthenticator.orm import UserInfo

    return UserInfo.find(db, username) is not None


def set_password(db: Session, username: str, password: str) -> None:
    """Create ``username`` with ``password``, authorized to log in, or reset its password.

    Only the bcrypt hash is stored.

    Raises:
        HubConfigError: the password is shorter than :data:`MIN_PASSWORD_LENGTH`.
    """
    from nativeauthenticator.orm import UserInfo

    if len(password) < MIN_PASSWORD_LENGTH:
        raise HubConfigError(f"password too short: use at least {MIN_PASSWORD_LENGTH} characters")
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt())
    info = UserInfo.find(db, username)
    if info is None:
        db.add(UserInfo(username=username, password=hashed, is_authorized=True))
    else:
        info.password = hashed
        info.is_authorized = True
    db.commit()


def admin_banner(admin: str, password: str | None, in_file: Path | None = None) -> str:
    """What the first start prints: the admin's name and generated password, once; or,
    when the output is not a terminal, the file that holds the password."""
    if password is None:
        shown = (
            f"  Admin account created:  user {admin!r}; its password is in {in_file}\n"
            "  (readable by this account only, removed at the admin's first log-in;\n"
            "  not printed, as this output is not a terminal and may be kept).\n"
        )
    else:
        shown = (
            f"  Admin account created:  user {admin!r}  password {password}\n"
            "  This password is shown only this once and stored only as a hash.\n"
        )
    return (
        "\n" + shown + f"  Lost it? alchemist-hub reset-password {admin}\n"
        "  Other users sign up at /hub/signup; approve them at /hub/authorize.\n"
    )


def system_account(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def is_hub_account(entry: pwd.struct_passwd) -> bool:
    """Whether the hub made this system account (and may run servers as it)."""
    return entry.pw_gecos.split(",", 1)[0] == ACCOUNT_MARKER


def is_retired_account(entry: pwd.struct_passwd) -> bool:
    """Whether this is the hub-made account of a deleted hub user."""
    return entry.pw_gecos.split(",", 1)[0] == RETIRED_MARKER


def check_account_name_free(name: str) -> None:
    """Refuse a hub user whose name is a system account the hub did not make, or the
    retired account of a deleted hub user.

    Raises:
        HubConfigError: ``name`` is such an account (``root``, ``daemon``, a person's,
            a deleted user's).
    """
    entry = system_account(name)
    if entry is not None and is_retired_account(entry):
        raise HubConfigError(
            f"{name!r} belonged to a deleted hub user, whose files are kept in"
            f" {entry.pw_dir}; the name stays taken until an administrator runs"
            f" alchemist-hub release-name {name} (which deletes that account and its files)"
        )
    if entry is not None and not is_hub_account(entry):
        raise HubConfigError(
            f"{name!r} is an existing system account that the hub did not create;"
            " the hub never runs a server as it: choose another user name"
        )


def ensure_system_account(name: str, home_base: Path) -> pwd.struct_passwd:
    """Return the hub-made system account ``name``, creating it (and its home) if needed.

    The home is ``<home_base>/<name>``, mode 0700, so no other account can read it.
    Needs root.

    Raises:
        HubConfigError: ``name`` is a system account the hub did not make, or useradd
            failed (its message is included).
    """
    check_account_name_free(name)
    entry = system_account(name)
    if entry is None:
        home = home_base / name
        home_base.mkdir(parents=True, exist_ok=True)
        cmd = [
            "useradd",
            "--create-home",
            "--home-dir",
            str(home),
            "--shell",
            "/bin/bash",
            "--comment",
            ACCOUNT_MARKER,
            "--user-group",
            name,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise HubConfigError(
                f"cannot create the system account {name!r}: {done.stderr.strip()}"
            )
        entry = pwd.getpwnam(name)
    os.chmod(entry.pw_dir, 0o700)
    return entry


def changeable_by_others(paths: list[Path], trees: list[Path]) -> list[str]:
    """What of the code a root hub runs its users could change (empty: nothing): each
    of ``paths`` and every folder above it, and everything in ``trees``, must not be
    writable by group or others (a sticky folder such as ``/tmp`` may be: nobody can
    replace another's entries in it), nor belong to an account the hub made for a user.
    A root hub imports these files: whoever could edit one would run code as root. (A
    checkout of the administrator's own login is theirs to trust.)
    """
    problems: list[str] = []
    seen: set[Path] = set()

    def check(path: Path) -> None:
        if path in seen:
            return
        seen.add(path)
        try:
            st = os.lstat(path)
        except OSError:
            return
        if st.st_uid != 0:
            try:
                entry = pwd.getpwuid(st.st_uid)
            except KeyError:
                entry = None
            if entry is not None and (is_hub_account(entry) or is_retired_account(entry)):
                problems.append(f"{path} belongs to hub user {entry.pw_name}")
                return
        if (
            not stat.S_ISLNK(st.st_mode)
            and st.st_mode & 0o022
            and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX)
        ):
            problems.append(f"{path} can be written by others (mode {st.st_mode & 0o777:o})")

    for path in [*paths, *trees]:
        real = Path(os.path.realpath(path))
        for folder in [*reversed(real.parents), real]:
            check(folder)
    for tree in trees:
        for root, dirs, files in os.walk(os.path.realpath(tree)):
            for name in [*dirs, *files]:
                check(Path(root) / name)
    return problems


def check_code_is_roots(config: Path) -> None:
    """As root: refuse to start when its users could change the code the hub runs
    (this package, the interpreter and its standard library, site-packages, the hub's
    config file).

    Raises:
        HubConfigError: one line naming the first such path and the fix.
    """
    import sysconfig

    import alchemist

    paths = [
        Path(sys.executable),
        Path(sysconfig.get_paths()["stdlib"]),
        Path(sysconfig.get_paths()["purelib"]),
        Path(sys.prefix) / "bin",
        config,
    ]
    problems = changeable_by_others(paths, [Path(alchemist.__file__).parent])
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise HubConfigError(
            f"the hub runs as root, but other accounts could change code it runs:"
            f" {problems[0]}{more}; make it not writable by others (chmod -R go-w) and"
            " not a hub user's (chown -R root:), or run the hub from a root-owned install"
        )


def closed_dirs(path: Path) -> list[Path]:
    """Directories on the way to ``path`` (symlinks resolved) that other accounts cannot enter.

    A server started as a hub user's account runs this environment's Python; every
    directory above the interpreter and its standard library must allow others to
    traverse it (the ``o+x`` bit). Reading stays governed by each file's own mode.
    """
    closed: list[Path] = []
    real = Path(os.path.realpath(path))
    for parent in reversed(real.parents):
        if not os.stat(parent).st_mode & 0o001:
            closed.append(parent)
    return closed


def end_processes_of(uid: int, grace: float = 5.0) -> int:
    """End every process of account ``uid`` (SIGTERM, then SIGKILL after ``grace``
    seconds); returns how many there were."""
    import psutil

    procs = []
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info["uids"]
        if uids is not None and uid in (uids.real, uids.effective):
            procs.append(proc)
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, left = psutil.wait_procs(procs, timeout=grace)
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=grace)
    return len(procs)


def retire_system_account(name: str) -> int:
    """The hub user ``name`` was deleted: end their account's processes, lock it and
    mark it retired (see the module); returns how many processes ended. No-op for an
    account the hub did not make. Needs root.

    Raises:
        HubConfigError: usermod failed (its message is included).
    """
    entry = system_account(name)
    if entry is None or not is_hub_account(entry):
        return 0
    when = time.strftime("%Y-%m-%d", time.gmtime())
    done = subprocess.run(
        ["usermod", "--lock", "--expiredate", "1", "--comment", f"{RETIRED_MARKER},{when}", name],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise HubConfigError(f"cannot retire the system account {name!r}: {done.stderr.strip()}")
    # Locked and retired first, so that nothing of it starts again while it ends.
    return end_processes_of(entry.pw_uid)


def remove_system_account(name: str) -> None:
    """Delete a hub-made (or retired) system account and its home, its processes ended
    first (no-op if absent or not the hub's)."""
    entry = system_account(name)
    if entry is None or not (is_hub_account(entry) or is_retired_account(entry)):
        return
    end_processes_of(entry.pw_uid)
    subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


def release_name(name: str) -> str:
    """``alchemist-hub release-name``: delete the retired account ``name`` and its home.

    Raises:
        HubConfigError: ``name`` is no retired account of the hub.
    """
    entry = system_account(name)
    if entry is None or not is_retired_account(entry):
        raise HubConfigError(
            f"{name!r} is not the account of a deleted hub user: nothing to release"
        )
    remove_system_account(name)
    if system_account(name) is not None:
        raise HubConfigError(f"userdel could not delete the account {name!r}")
    return entry.pw_dir
