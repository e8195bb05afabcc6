# JupyterHub configuration of Alchemist's embedded, one-machine hub (package data).
#
# Start it with `alchemist-hub start` (which also creates the admin account on the first
# start and finds this file through importlib.resources), or run `jupyterhub -f` on this
# file directly. Settings come from the ALCHEMIST_HUB_* environment variables
# described in alchemist/hub/embedded/settings.py and docs/hub.md; everything else is in
# alchemist/hub/embedded/config.py.
from alchemist.hub.embedded.config import configure

c = get_config()  # type: ignore[name-defined]  # noqa: F821
configure(c)
