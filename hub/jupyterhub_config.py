# JupyterHub configuration of Alchemist's embedded, one-machine hub.
#
# Start it with `python -m alchemist.hubapp` (which also creates the admin account on
# the first start) or `jupyterhub -f hub/jupyterhub_config.py`. Settings come from the
# ALCHEMIST_HUB_* environment variables described in alchemist/hubapp/settings.py and
# docs/hub.md; everything else is in alchemist/hubapp/config.py.
from alchemist.hubapp.config import configure

c = get_config()  # type: ignore[name-defined]  # noqa: F821
configure(c)
