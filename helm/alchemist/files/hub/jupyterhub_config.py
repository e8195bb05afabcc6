# The Alchemist chart's JupyterHub configuration. The hub ConfigMap carries this file
# unchanged (templates/hub/configmap.yaml reads it with .Files.Get) and mounts it in the
# hub pod at /usr/local/etc/alchemist/, beside what Helm renders from the values:
#   hub-config.yaml   every resolved name and setting (see alchemist.hub.kubernetes.config)
#   extra_config.py   hub.extraConfig, present only when that value is set
# JupyterHub runs this file with its config object `c` in scope.
from pathlib import Path

from alchemist.hub.kubernetes import configure_from_file

HUB_CONFIG = Path("/usr/local/etc/alchemist/hub-config.yaml")

hub_config = configure_from_file(c, HUB_CONFIG)  # noqa: F821

# hub.extraConfig runs last, in this file's namespace (c and hub_config in scope), so it
# can change anything configured above.
extra_config = HUB_CONFIG.with_name("extra_config.py")
if extra_config.is_file():
    exec(compile(extra_config.read_text(encoding="utf-8"), str(extra_config), "exec"))
