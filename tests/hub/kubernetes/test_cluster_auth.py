"""The chart hub's authenticator (``alchemist.hub.kubernetes.auth.ClusterAuthenticator``):
nobody can claim an admin's name by signing up first, and failed logins lock out.

Real here: NativeAuthenticator's own sign-up (``create_user``) and login
(``authenticate``) code, on JupyterHub's own ORM in an in-memory SQLite database,
configured by ``configure_hub`` from the hub config the chart renders (Helm). Not
here: the HTTP pages around them (``test_hub_boots.py`` boots the chart's hub behind
its proxy and shows the sign-up page); the lockout clock is moved by editing the
recorded time of the last failed attempt, not by waiting.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from traitlets.config import Config

from alchemist.hub.kubernetes import configure_hub
from alchemist.hub.kubernetes.auth import ClusterAuthenticator
from tests.hub.kubernetes.spawning import chart_hub_config

ATTACKER_PASSWORD = "mallory-was-here-2026"


@pytest.fixture
def db() -> Iterator[Any]:
    from jupyterhub import orm

    session = orm.new_session_factory("sqlite://")()
    yield session
    session.close()


@pytest.fixture
def hub_config(helm: str) -> Config:
    c = Config()
    configure_hub(c, chart_hub_config(helm, "hub.adminUsers={admin}"))
    return c


def login(auth: ClusterAuthenticator, user: str, password: str) -> str | None:
    result: str | None = asyncio.run(
        auth.authenticate(None, {"username": user, "password": password})
    )
    return result


def test_admin_exists_before_anyone_can_sign_up_as_admin(
    db: Any, hub_config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    from nativeauthenticator.orm import UserInfo

    auth = ClusterAuthenticator(config=hub_config, _deprecated_db_session=db)
    printed = capsys.readouterr().out
    match = re.search(r"user 'admin'\s+password (\S+)", printed)
    assert match, printed
    password = match.group(1)
    info = UserInfo.find(db, "admin")
    assert info is not None and info.is_authorized
    assert password.encode() not in info.password  # a hash, not the password

    # The sign-up a stranger makes first: refused, the account exists.
    assert auth.create_user("admin", ATTACKER_PASSWORD) is None
    assert auth.create_user("Admin", ATTACKER_PASSWORD) is None  # normalized to admin
    assert login(auth, "admin", ATTACKER_PASSWORD) is None
    assert login(auth, "admin", password) == "admin"

    # A hub restart keeps the account and prints no new password.
    again = ClusterAuthenticator(config=hub_config, _deprecated_db_session=db)
    assert capsys.readouterr().out == ""
    assert login(again, "admin", password) == "admin"


def test_without_pre_creation_the_first_sign_up_would_be_admin(db: Any, hub_config: Config) -> None:
    """Why the pre-creation matters: NativeAuthenticator itself authorizes a sign-up
    under an admin name at once (the attack the ClusterAuthenticator closes)."""
    from nativeauthenticator import NativeAuthenticator

    plain = NativeAuthenticator(config=hub_config, _deprecated_db_session=db)
    info = plain.create_user("admin", ATTACKER_PASSWORD)
    assert info is not None and info.is_authorized
    assert login(plain, "admin", ATTACKER_PASSWORD) == "admin"


def test_five_failed_logins_lock_the_name_out(db: Any, hub_config: Config) -> None:
    from nativeauthenticator.orm import UserInfo

    auth = ClusterAuthenticator(config=hub_config, _deprecated_db_session=db)
    assert auth.allowed_failed_logins == 5
    assert auth.create_user("carol", "carols-long-password-1") is not None
    UserInfo.change_authorization(db, "carol")  # an admin approves the sign-up
    assert login(auth, "carol", "carols-long-password-1") == "carol"

    for _ in range(4):
        assert login(auth, "carol", "guess") is None
    assert login(auth, "carol", "carols-long-password-1") == "carol"  # 4 are not enough

    for _ in range(5):
        assert login(auth, "carol", "guess") is None
    # Locked: even the right password is refused...
    assert login(auth, "carol", "carols-long-password-1") is None
    # ...until seconds_before_next_try have passed since the last failure.
    assert auth.seconds_before_next_try == 60
    auth.login_attempts["carol"]["time"] -= timedelta(seconds=61)
    assert login(auth, "carol", "carols-long-password-1") == "carol"
