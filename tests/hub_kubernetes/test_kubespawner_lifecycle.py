"""KubeSpawner start / poll / stop of a notebook configured by ``alchemist.hub.kubernetes``.

STAND-IN, NOT KUBERNETES. No Kubernetes API server can run on this project's machines
(ENVIRONMENT.md), so KubeSpawner (through kubernetes-asyncio, its real client) talks to
kmock's ``KubernetesEmulator`` served over HTTP on 127.0.0.1 by ``kmock.Server``: an
in-memory store that creates, lists, watches, patches and deletes objects. What a real
API server would add, :class:`ApiServerStandin` adds: the namespace, uid,
creationTimestamp and resourceVersion of a new object, ``status.phase: Pending`` of a
new pod, and ``watch=True`` (as kubernetes-asyncio sends it) read as ``watch=true``.
There is no scheduler and no kubelet: the test plays the kubelet, patching the pod's
status through the API as a kubelet would. kmock does not filter lists by label
selector; KubeSpawner filters nothing itself, so every pod of the namespace is the
hub's here, as it is in a namespace that only the hub spawns into.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import kmock
import kubernetes_validate
import pytest
from aiohttp import web
from kmock._internal import enums

from tests.hub_kubernetes.spawning import chart_hub_config, make_spawner

NAMESPACE = "alchemist"
POD = "jupyter-alice"
DEADLINE_S = 20.0


class ApiServerStandin(kmock.KubernetesEmulator):
    """kmock's emulator plus the fields a real API server fills in (module docstring)."""

    _versions = itertools.count(1)

    async def __call__(self, raw_request: web.BaseRequest) -> web.StreamResponse:
        # kmock recognises only watch=true; kubernetes-asyncio sends watch=True.
        if raw_request.query.get("watch") in ("True", "1"):
            raw_request = raw_request.clone(rel_url=raw_request.rel_url.update_query(watch="true"))
        return await super().__call__(raw_request)

    async def _handle(self, request: Any) -> web.StreamResponse:
        writes = (enums.action.CREATE, enums.action.UPDATE)
        if request.resource is not None and request.action in writes:
            data = request.data if isinstance(request.data, dict) else {}
            meta = data.setdefault("metadata", {})
            if request.action == enums.action.CREATE:
                if request.namespace:
                    meta.setdefault("namespace", request.namespace)
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault(
                    "creationTimestamp",
                    datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                )
                if request.resource.plural == "pods":
                    data.setdefault("status", {"phase": "Pending"})
            meta["resourceVersion"] = str(next(self._versions))
        return await super()._handle(request)


@asynccontextmanager
async def api_server() -> AsyncIterator[tuple[ApiServerStandin, str]]:
    async with ApiServerStandin() as api, kmock.Server(api) as server:
        for plural in ["pods", "persistentvolumeclaims", "events"]:
            api.resources[f"v1/{plural}"] = {}
        yield api, str(server.url).rstrip("/")


def stored(api: ApiServerStandin, plural: str, name: str) -> dict[str, Any] | None:
    """A copy of the object as the stand-in stores it, or None once deleted."""
    for (resource, namespace, obj_name), obj in api.objects.items():
        if resource.plural == plural and namespace == NAMESPACE and obj_name == name:
            return None if obj.deleted else copy.deepcopy(obj.raw)
    return None


async def kubelet_sets_status(url: str, status: dict[str, Any]) -> None:
    """Play the kubelet: wait (with a deadline) for the pod, then patch its status."""
    import kubernetes_asyncio.client as k8s

    async with k8s.ApiClient(k8s.Configuration(host=url)) as client:
        core = k8s.CoreV1Api(client)
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                await core.read_namespaced_pod(POD, NAMESPACE)
                break
            except k8s.ApiException as e:
                if e.status != 404 or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.05)
        await core.patch_namespaced_pod_status(POD, NAMESPACE, {"status": status})


def running(ready: bool = True) -> dict[str, Any]:
    return {
        "phase": "Running",
        "podIP": "10.1.2.3",
        "containerStatuses": [
            {
                "name": "notebook",
                "ready": ready,
                "restartCount": 0,
                "image": "alchemist/notebook:0.1.0",
                "imageID": "",
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            }
        ],
    }


async def stop_reflectors() -> None:
    """KubeSpawner keeps its watchers on the class; stop them so no task outlives the test."""
    from kubespawner import KubeSpawner

    for reflector in list(KubeSpawner.reflectors.values()):
        await reflector.stop()
    KubeSpawner.reflectors.clear()


def test_start_poll_stop_against_the_standin(helm: str, kubeconfig: Path) -> None:
    values = chart_hub_config(helm)

    async def scenario() -> None:
        async with api_server() as (api, url):
            spawner = make_spawner(values, k8s_api_host=url, start_timeout=30)
            spawner.user_options = {"profile": "gpu-1"}
            await spawner.load_user_options()
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
            spawner.user_options = {"profile": "cpu"}
            await spawner.load_user_options()
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

    from tests.hub_kubernetes.test_profile_manifests import GOLDEN, normalize

    values = chart_hub_config(helm)

    async def scenario() -> dict[str, Any]:
        async with api_server() as (api, url):
            spawner = make_spawner(values, k8s_api_host=url, start_timeout=30)
            spawner.user_options = {"profile": profile}
            await spawner.load_user_options()
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
