"""The chart's hub authenticator: NativeAuthenticator whose admin names cannot be taken.

NativeAuthenticator authorizes a sign-up at once when the name is in ``admin_users``,
so on a fresh hub whoever signs up first as ``admin`` *is* the admin. Here every admin
account is created inside the hub before it serves a page, with a generated password
printed once to the hub's log (readable only by whoever may read the hub pod's logs,
i.e. the cluster's operators); a sign-up under that name then finds it taken. The
failed-login lockout is the embedded hub's (5 tries, then 60 s).
"""

from __future__ import annotations

from typing import Any

from nativeauthenticator import NativeAuthenticator
from nativeauthenticator.orm import UserInfo
from traitlets import List, Unicode


class ClusterAuthenticator(NativeAuthenticator):
    """NativeAuthenticator that creates the admin accounts itself (see the module)."""

    create_admins = List(
        Unicode(),
        config=True,
        help="Admin accounts to create with a generated password (printed once to the"
        " log) when they have none yet.",
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from alchemist.hub.embedded.accounts import generate_password, set_password

        for raw in self.create_admins:
            # As a sign-up would name it, so the account found is the one a sign-up hits.
            name = self.normalize_username(raw)
            if UserInfo.find(self.db, name) is None:
                password = generate_password()
                set_password(self.db, name, password)
                print(admin_banner(name, password), flush=True)


def admin_banner(admin: str, password: str) -> str:
    """What the hub prints once when it creates an admin account."""
    return (
        "\n"
        f"  Admin account created:  user {admin!r}  password {password}\n"
        "  This password is shown only this once and stored only as a hash.\n"
        "  Change it after logging in, at /hub/change-password.\n"
    )
