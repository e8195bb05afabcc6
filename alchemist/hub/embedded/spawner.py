"""Spawners of the embedded hub: one local process per user server.

:class:`AccountSpawner` (``accounts`` isolation, hub running as root) is JupyterHub's
``LocalProcessSpawner``: it makes the user's system account on the first spawn and
starts the server as that account, so the kernel, its jobs and their files belong to
the user and file permissions keep users apart.

:class:`SingleAccountSpawner` (``single`` isolation) runs every server as the hub's own
account with a separate home per user; it keeps users' files apart by convention only
(see ``docs/hub.md``).

Both give the server:

- ``ALCHEMIST_HOME=<home>/.alchemist``: the user's own job store and job directories;
- ``JUPYTER_PATH`` with a ``python3`` kernel spec that loads the ``alchemist``
  IPython extension, so the magics are there in every new notebook;
- the example notebooks in ``<home>/notebooks`` (copied once, see :mod:`.seed`).
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from jupyterhub.spawner import LocalProcessSpawner, SimpleLocalProcessSpawner
from traitlets import Unicode

from alchemist.errors import HubConfigError
from alchemist.hub.embedded.accounts import ensure_system_account
from alchemist.hub.embedded.seed import seed_home
from alchemist.hub.embedded.settings import ROOT_SINGLE_REFUSED, root_single_allowed

#: Data directory with the kernel spec that loads the extension (added to JUPYTER_PATH).
SHARE_DIR = Path(__file__).resolve().parent / "share" / "jupyter"

#: The Python environment Alchemist runs in; servers, kernels and jobs use it too.
ENV_BIN = Path(sys.executable).parent


def alchemist_env(env: dict[str, str], home: str) -> dict[str, str]:
    """Add what a user server needs for Alchemist to ``env`` (in place) and return it."""
    env["ALCHEMIST_HOME"] = str(Path(home) / ".alchemist")
    jupyter_path = [str(SHARE_DIR)]
    if env.get("JUPYTER_PATH"):
        jupyter_path.append(env["JUPYTER_PATH"])
    env["JUPYTER_PATH"] = os.pathsep.join(jupyter_path)
    path = env.get("PATH") or os.defpath
    if str(ENV_BIN) not in path.split(os.pathsep):
        path = os.pathsep.join([str(ENV_BIN), path])
    env["PATH"] = path
    return env


class AccountSpawner(LocalProcessSpawner):
    """Start each user's server as their own system account (made on first spawn)."""

    home_base = Unicode(
        "/home",
        config=True,
        help="Directory in which the system accounts' homes are made (<home_base>/<user>).",
    )
    examples_dir = Unicode(
        "",
        config=True,
        help="Example notebooks copied into <home>/notebooks on the first spawn ('' for none).",
    )

    async def start(self) -> Any:
        """Make the account, copy the examples as the user, then start the server.

        Raises:
            HubConfigError: the user name is a system account the hub did not make,
                or useradd failed; JupyterHub shows the message on the spawn page.
        """
        entry = await asyncio.to_thread(ensure_system_account, self.user.name, Path(self.home_base))
        if self.examples_dir:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "alchemist.hub.embedded.seed",
                self.examples_dir,
                entry.pw_dir,
                user=entry.pw_uid,
                group=entry.pw_gid,
                extra_groups=[],
                cwd=entry.pw_dir,
                env={"HOME": entry.pw_dir, "PATH": os.defpath},
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            _, err = await proc.communicate()
            if proc.returncode != 0:
                self.log.warning(
                    "could not copy the examples for %s: %s", self.user.name, err.decode()
                )
        return await super().start()

    def user_env(self, env: dict[str, str]) -> dict[str, str]:
        env = super().user_env(env)
        return alchemist_env(env, env["HOME"])


class SingleAccountSpawner(SimpleLocalProcessSpawner):
    """Start every user's server as the hub's own account, each with its own home.

    This keeps users' files apart by convention only: every server can read and
    signal everything of every other (see ``docs/hub.md``). In a hub run as root it
    would run every server as root: it refuses to, unless the hub's environment has
    ``ALCHEMIST_HUB_ALLOW_ROOT_SINGLE=1`` (the hub's own start-up refuses first; this
    guards a hand-written ``jupyterhub_config.py`` that picks this spawner).
    """

    examples_dir = Unicode(
        "",
        config=True,
        help="Example notebooks copied into <home>/notebooks on the first spawn ('' for none).",
    )

    async def start(self) -> Any:
        if os.geteuid() == 0 and not root_single_allowed(os.environ):
            raise HubConfigError(ROOT_SINGLE_REFUSED)
        home = Path(self.home_dir)
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.examples_dir:
            await asyncio.to_thread(seed_home, home, Path(self.examples_dir))
        return await super().start()

    def user_env(self, env: dict[str, str]) -> dict[str, str]:
        env = super().user_env(env)
        return alchemist_env(env, self.home_dir)
