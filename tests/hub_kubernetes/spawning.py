"""Helpers of the KubeSpawner tests: a KubeSpawner configured the way the chart's hub is.

The hub config document comes from the chart itself (``helm template``, the hub
ConfigMap), so these tests spawn exactly what a deployed hub would.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import yaml
from traitlets.config import Config

from alchemist.hub.kubernetes import configure_kubespawner
from tests.helm.chart import find, render

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: stand-in
  cluster: {server: "http://127.0.0.1:9"}
contexts:
- name: stand-in
  context: {cluster: stand-in, user: nobody}
current-context: stand-in
users:
- name: nobody
  user: {}
"""


def write_kubeconfig(directory: Path) -> Path:
    """A kubeconfig whose server is never contacted (KubeSpawner loads one at init)."""
    path = directory / "kubeconfig"
    path.write_text(KUBECONFIG)
    return path


def chart_hub_config(helm: str, *sets: str) -> dict[str, Any]:
    """The hub config document the chart renders with its default values (plus ``sets``)."""
    (cm,) = find(render(helm, sets=sets), "ConfigMap", "-hub-config")
    loaded: dict[str, Any] = yaml.safe_load(cm["data"]["hub-config.yaml"])
    return loaded


def make_spawner(values: dict[str, Any], user: str = "alice", **traits: Any) -> Any:
    """A KubeSpawner configured by ``alchemist.hub.kubernetes.configure_kubespawner``.

    ``_mock=True`` is KubeSpawner's own test switch: it gives the spawner stand-in
    ``hub`` fields; the ``user`` is passed explicitly so names are realistic.

    Args:
        values: The hub config document.
        user: The JupyterHub user name.
        **traits: Extra ``c.KubeSpawner`` settings (e.g. ``k8s_api_host``).
    """
    from kubespawner import KubeSpawner

    c = Config()
    configure_kubespawner(c, values)
    for name, value in traits.items():
        setattr(c.KubeSpawner, name, value)
    owner = types.SimpleNamespace(name=user, id=1, url=f"/user/{user}/")
    return KubeSpawner(config=c, user=owner, _mock=True)
