"""Helpers of the KubeSpawner tests: a KubeSpawner configured the way the chart's hub is.

The hub config document comes from the chart itself (``helm template``, the hub
ConfigMap), so these tests spawn exactly what a deployed hub would. The one stand-in:
KubeSpawner reads the hub's namespace (``{hubnamespace}`` of user namespace names)
from the service-account file of the hub pod, which does not exist here; the spawner
made by :func:`make_spawner` answers the release namespace the chart was rendered
into (:data:`HUB_NAMESPACE`), as it would in the hub pod.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import yaml
from traitlets.config import Config

from alchemist.hub.kubernetes import configure_kubespawner
from tests.support.chart import find, render

#: The release namespace :func:`tests.support.chart.render` renders into (the hub's).
HUB_NAMESPACE = "alchemist"

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

    class HubPodKubeSpawner(KubeSpawner):
        """KubeSpawner as it runs in the hub pod (the module docstring)."""

        def _namespace_default(self) -> str:
            return HUB_NAMESPACE

    c = Config()
    configure_kubespawner(c, values)
    for name, value in traits.items():
        setattr(c.KubeSpawner, name, value)
    owner = types.SimpleNamespace(name=user, id=1, url=f"/user/{user}/")
    return HubPodKubeSpawner(config=c, user=owner, _mock=True)


async def pod_manifest(spawner: Any, profile: str | None = None) -> dict[str, Any]:
    """The notebook pod KubeSpawner's own ``get_pod_manifest()`` builds, as a dict."""
    from kubernetes_asyncio.client import ApiClient

    if profile is not None:
        spawner.user_options = {"profile": profile}
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    async with ApiClient() as api:
        manifest: dict[str, Any] = api.sanitize_for_serialization(pod)
    return manifest
