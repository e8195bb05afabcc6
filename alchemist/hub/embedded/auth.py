"""The embedded hub's authenticator: real passwords, kept as bcrypt hashes in the hub DB.

jupyterhub-nativeauthenticator rather than PAM, because the embedded hub must work
where hub users have no system account yet (it makes them on first spawn) or never get
one (``single`` isolation), and because PAM would need the hub to read system password
hashes as root. New users sign up at ``/hub/signup`` and an admin approves them at
``/hub/authorize``; the admin made on first start logs in with its printed password.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from nativeauthenticator import NativeAuthenticator
from nativeauthenticator.orm import UserInfo
from traitlets import Bool, Unicode

from alchemist.errors import HubConfigError
from alchemist.hub.embedded.accounts import (
    admin_banner,
    check_account_name_free,
    generate_password,
    retire_system_account,
    set_password,
)


class AlchemistAuthenticator(NativeAuthenticator):
    """NativeAuthenticator that refuses names of system accounts the hub did not make.

    The login page is JupyterHub's own (with a sign-up link, see
    ``templates/login.html``): NativeAuthenticator 1.3.0's login handler calls
    ``self.statsd``, which JupyterHub 6 removed, so every log-in through it fails
    with a 500. JupyterHub's handler calls the same :meth:`authenticate`.
    """

    system_accounts = Bool(
        False,
        config=True,
        help="Users get system accounts of their name: refuse names of existing accounts"
        " that the hub did not create (root, daemon, people's own logins).",
    )

    create_admin = Unicode(
        "",
        config=True,
        help="Admin account to create, with a generated password printed once to stdout,"
        " when it has no password yet ('' for none). Only its bcrypt hash is stored.",
    )

    admin_password_file = Unicode(
        "",
        config=True,
        help="Where the first start's admin password goes when stdout is not a terminal"
        " (a log file, a service's journal, where it would be kept for good): a file made"
        " 0600, removed at the admin's first log-in ('' to print it anyway).",
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Created here, inside the hub and before it serves any page, so nobody can
        # sign up under the admin's name first, and both ways of starting the hub
        # (alchemist-hub start, jupyterhub -f on the packaged jupyterhub_config.py) do it.
        if self.create_admin and UserInfo.find(self.db, self.create_admin) is None:
            password = generate_password()
            set_password(self.db, self.create_admin, password)
            if sys.stdout.isatty() or not self.admin_password_file:
                print(admin_banner(self.create_admin, password), flush=True)
            else:
                path = Path(self.admin_password_file)
                path.unlink(missing_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(password + "\n")
                print(admin_banner(self.create_admin, None, path), flush=True)

    async def authenticate(self, handler: Any, data: dict[str, Any]) -> Any:
        """NativeAuthenticator's check; the admin's first log-in removes the file that
        held its first password."""
        user = await super().authenticate(handler, data)
        if (
            user
            and self.admin_password_file
            and self.normalize_username(str(data.get("username", ""))) == self.create_admin
        ):
            Path(self.admin_password_file).unlink(missing_ok=True)
        return user

    def validate_username(self, username: str) -> bool:
        """Whether ``username`` may be a hub user (pattern, characters, account clash)."""
        if not super().validate_username(username):
            return False
        if self.system_accounts:
            try:
                check_account_name_free(username)
            except HubConfigError as e:
                self.log.warning("refused user name: %s", e)
                return False
        return True

    async def delete_user(self, user: Any) -> None:
        """A deleted hub user's system account is retired (processes ended, locked, name
        kept from the next sign-up: :func:`~alchemist.hub.embedded.accounts.retire_system_account`)."""
        super().delete_user(user)
        if self.system_accounts:
            import asyncio

            ended = await asyncio.to_thread(retire_system_account, user.name)
            self.log.info(
                "retired the system account of deleted user %s (%d processes ended)",
                user.name,
                ended,
            )

    def get_handlers(self, app: Any) -> list[tuple[str, Any]]:
        """NativeAuthenticator's pages (sign-up, authorize, change password), not /login."""
        return [h for h in super().get_handlers(app) if h[0] != r"/login"]
