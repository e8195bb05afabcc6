"""KubeSpawner start / poll / stop of a notebook configured by ``alchemist.hub.kubernetes``.

STAND-IN, NOT KUBERNETES: KubeSpawner (through kubernetes-asyncio, its real client)
talks to the kmock-based stand-in API server of ``apiserver.py`` (its docstring says
what it adds to kmock and what it does not model). On the chart's defaults each user
gets a namespace of their own: as JupyterHub does before ``start()``, each test runs the
spawner's pre-spawn hook, which applies the user's namespace objects, then starts the
notebook there. There is no scheduler and no kubelet: the test plays the kubelet,
patching the pod's status through the API as a kubelet would. kmock does not filter
lists by label selector; KubeSpawner filters nothing itself, so every pod is the hub's
here, as it is on a cluster where only the hub spawns notebooks.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.hub.kubernetes.spawning import HUB_NAMESPACE, chart_hub_config, make_spawner
from tests.support.kmock_apiserver import (
    DEADLINE_S,
    ApiServerStandin,
    api_server,
    running,
    stop_reflectors,
)
from tests.support.kmock_apiserver import kubelet_sets_status as _kubelet_sets_status

NAMESPACE = f"{HUB_NAMESPACE}-alice"  # the user namespace of alice
POD = "jupyter-alice"


def stored(api: ApiServerStandin, plural: str, name: str) -> dict[str, Any] | None:
    """A copy of alice's object as the stand-in stores it, or None once deleted."""
    return api.stored(plural, NAMESPACE, name)


async def kubelet_sets_status(url: str, status: dict[str, Any]) -> None:
    await _kubelet_sets_status(url, NAMESPACE, POD, status)


async def prepared(spawner: Any, profile: str) -> None:
    """What JupyterHub does before ``start()``: the pre-spawn hook, then the options."""
    await spawner.run_pre_spawn_hook()
    spawner.user_options = {"profile": profile}
    await spawner.load_user_options()


def test_start_poll_stop_against_the_standin(helm: str, kubeconfig: Path) -> None:
    values = chart_hub_config(helm)

    async def scenario() -> None:
        async with api_server() as (api, url):
            spawner = make_spawner(values, k8s_api_host=url, start_timeout=30)
            await prepared(spawner, "gpu-1")
            try:
                start = asyncio.ensure_future(spawner.start())
                await kubelet_sets_status(url, running())
                pod_url = await asyncio.wait_for(start, DEADLINE_S)
                assert pod_url == "http://10.1.2.3:8888"
                assert await spawner.poll() is None

                # What reached the API server is a valid pod with the profile's GPU.
                pod = stored(api, "pods", POD)
                assert pod is not None
                kubernetes_validate.validate(pod, "1.33.0", strict=True)
                (container,) = pod["spec"]["containers"]
                assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
                env = {e["name"]: e["value"] for e in container["env"]}
                assert env["ALCHEMIST_BACKEND"] == "kubernetes"
                # KubeSpawner created the user's home claim first.
                pvc = stored(api, "persistentvolumeclaims", "claim-alice")
                assert pvc is not None
                assert pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"

                await spawner.stop()
                assert stored(api, "pods", POD) is None
                assert await spawner.poll() == 1
                # Stopping keeps the home claim: the user's files survive.
                assert stored(api, "persistentvolumeclaims", "claim-alice") is not None
            finally:
                await stop_reflectors()

    asyncio.run(scenario())


def test_poll_reports_the_exit_code_of_a_notebook_that_died(helm: str, kubeconfig: Path) -> None:
    values = chart_hub_config(helm)

    async def scenario() -> None:
        async with api_server() as (api, url):
            spawner = make_spawner(values, k8s_api_host=url, start_timeout=30)
            await prepared(spawner, "cpu")
            try:
                start = asyncio.ensure_future(spawner.start())
                await kubelet_sets_status(url, running())
                await asyncio.wait_for(start, DEADLINE_S)

                died = running(ready=False)
                died["containerStatuses"][0]["state"] = {
                    "terminated": {"exitCode": 3, "reason": "Error"}
                }
                await kubelet_sets_status(url, died)
                deadline = time.monotonic() + DEADLINE_S
                while (code := await spawner.poll()) is None:
                    assert time.monotonic() < deadline, "poll never saw the container exit"
                    await asyncio.sleep(0.05)
                assert code == 3
                # KubeSpawner deletes a stopped pod (delete_stopped_pods).
                assert stored(api, "pods", POD) is None
            finally:
                await stop_reflectors()

    asyncio.run(scenario())


@pytest.mark.parametrize("profile", ["cpu", "gpu-8"])
def test_pod_created_through_the_api_is_the_golden_manifest(
    helm: str, kubeconfig: Path, profile: str
) -> None:
    """start() sends exactly what get_pod_manifest() built (the golden files)."""
    import yaml

    from tests.hub.kubernetes.test_profile_manifests import GOLDEN, normalize

    values = chart_hub_config(helm)

    async def scenario() -> dict[str, Any]:
        async with api_server() as (api, url):
            spawner = make_spawner(values, k8s_api_host=url, start_timeout=30)
            await prepared(spawner, profile)
            try:
                start = asyncio.ensure_future(spawner.start())
                await kubelet_sets_status(url, running())
                await asyncio.wait_for(start, DEADLINE_S)
                pod = stored(api, "pods", POD)
                assert pod is not None
                await spawner.stop()
                return pod
            finally:
                await stop_reflectors()

    pod = asyncio.run(scenario())
    for key in ["uid", "creationTimestamp", "resourceVersion", "namespace"]:
        pod["metadata"].pop(key)
    pod.pop("status")
    # The stand-in server's URL is the only difference from get_pod_manifest()'s output.
    golden = yaml.safe_load((GOLDEN / f"pod-{profile}.yaml").read_text())
    assert normalize(pod) == golden
