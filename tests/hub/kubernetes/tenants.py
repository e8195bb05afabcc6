"""Two users, alice and bob, as the chart's hub would set them up on a cluster.

What is real: the chart rendered by Helm (its hub config, Roles, ClusterRoles, network
and admission policies), the hub's own code (``alchemist.hub.kubernetes``:
``configure_kubespawner`` and ``tenancy.user_objects``, what the pre-spawn hook applies,
the egress NetworkPolicy among them), and KubeSpawner's own
``get_pod_manifest()`` / ``get_pvc_manifest()`` for each user's notebook pod and home
claim. What stands in: there is no API server, so nothing here is admitted or
scheduled; KubeSpawner reads the hub's namespace from the hub pod's service-account
file, which ``spawning.make_spawner`` answers with the release namespace.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from alchemist.hub.kubernetes import tenancy
from alchemist.hub.kubernetes.config import per_user_namespaces
from tests.hub.kubernetes.spawning import HUB_NAMESPACE, make_spawner, pod_manifest
from tests.support.chart import find, render

USERS = ("alice", "bob")

#: One team data set (an NFS export) on top of the chart's defaults.
DATASET_SETS = (
    "datasets[0].name=imagenet",
    "datasets[0].mountPath=/datasets/imagenet",
    "datasets[0].nfs.server=nfs.example.internal",
    "datasets[0].nfs.path=/exports/imagenet",
)


@dataclass
class Tenant:
    """One user's notebook as the chart's hub would start it."""

    name: str
    namespace: str
    objects: list[dict[str, Any]]  # what the pre-spawn hook applies
    pod: dict[str, Any]  # the notebook pod (it is created in ``namespace``)
    home_claim: dict[str, Any]  # KubeSpawner's claim-<user> (created in ``namespace``)
    token: str  # the JUPYTERHUB_API_TOKEN the hub gave this server

    @property
    def env(self) -> dict[str, str]:
        (container,) = self.pod["spec"]["containers"]
        return {e["name"]: e.get("value", "") for e in container["env"]}

    @property
    def container(self) -> dict[str, Any]:
        (container,) = self.pod["spec"]["containers"]
        return dict(container)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def claims(self) -> set[str]:
        """Every claim of this user's namespace: the hook's and KubeSpawner's."""
        names = {o["metadata"]["name"] for o in self.of_kind("PersistentVolumeClaim")}
        return names | {self.home_claim["metadata"]["name"]}


@dataclass
class Cluster:
    """The chart's objects and each user's, as they would be on the cluster."""

    docs: list[dict[str, Any]]  # the chart, rendered
    values: dict[str, Any]  # its hub config document
    users: dict[str, Tenant]

    @property
    def hub_namespace(self) -> str:
        return HUB_NAMESPACE

    def objects(self) -> list[dict[str, Any]]:
        """Everything: the chart's objects and every user's namespace objects."""
        return [*self.docs, *(o for t in self.users.values() for o in t.objects)]

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        """Labels of each user namespace (the hub namespace has only its name label)."""
        out: dict[str, dict[str, str]] = {self.hub_namespace: {}}
        for t in self.users.values():
            for ns in t.of_kind("Namespace"):  # none in shared mode: the hub's namespace
                out[t.namespace] = dict(ns["metadata"]["labels"])
        return out


def hub_config_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (cm,) = find(docs, "ConfigMap", "-hub-config")
    loaded: dict[str, Any] = yaml.safe_load(cm["data"]["hub-config.yaml"])
    return loaded


async def _tenant(values: dict[str, Any], user: str, profile: str) -> Tenant:
    spawner = make_spawner(values, user=user)
    spawner.api_token = f"{user}-secret-hub-token"
    pod = await pod_manifest(spawner, profile)
    from kubernetes_asyncio.client import ApiClient

    async with ApiClient() as api:
        claim: dict[str, Any] = api.sanitize_for_serialization(spawner.get_pvc_manifest())
    username = spawner._expand_user_properties("{username}")
    return Tenant(
        name=user,
        namespace=spawner.namespace,
        objects=(
            tenancy.user_objects(values, username, spawner.namespace)
            if per_user_namespaces(values)
            else []  # tenancy.mode shared: the chart made everything
        ),
        pod=pod,
        home_claim=claim,
        token=spawner.api_token,
    )


def cluster(helm: str, *sets: str, profile: str = "cpu") -> Cluster:
    """alice and bob on the chart rendered with ``sets`` (needs KUBECONFIG set, as the
    ``kubeconfig`` fixture does: KubeSpawner loads one when it starts)."""
    docs = render(helm, sets=sets)
    values = hub_config_of(docs)

    async def both() -> dict[str, Tenant]:
        return {u: await _tenant(values, u, profile) for u in USERS}

    return Cluster(docs=docs, values=values, users=asyncio.run(both()))


def writable_volumes(pod: dict[str, Any], namespace: str) -> set[tuple[str, str, str]]:
    """(namespace, claim, subPath) of every volume the pod's containers may write."""
    spec = pod["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    out: set[tuple[str, str, str]] = set()
    for c in [*spec["containers"], *(spec.get("initContainers") or [])]:
        for m in c.get("volumeMounts") or []:
            v = volumes[m["name"]]
            claim = v.get("persistentVolumeClaim")
            if m.get("readOnly") or (claim and claim.get("readOnly")):
                continue
            if claim:
                out.add((namespace, claim["claimName"], m.get("subPath", "")))
            elif "emptyDir" not in v:  # emptyDir is the pod's own scratch space
                out.add((namespace, f"<{sorted(set(v) - {'name'})[0]}>", m.get("subPath", "")))
    return out


def backend_as(tenant: Tenant, home: Path, monkeypatch: pytest.MonkeyPatch, api_client: Any) -> Any:
    """The real ``KubernetesBackend`` configured by exactly the ``ALCHEMIST_*`` environment
    of ``tenant``'s notebook pod, except ALCHEMIST_HOME and ALCHEMIST_K8S_MOUNT_PATH: the
    mount path of the user's claim is ``home`` here (a local directory: nothing is
    mounted on this machine)."""
    from traitlets.config import Config

    from alchemist.backends.kubernetes import KubernetesBackend

    for name, value in tenant.env.items():
        if name.startswith("ALCHEMIST_"):
            monkeypatch.setenv(name, value)
    home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("ALCHEMIST_HOME", str(home))
    monkeypatch.setenv("ALCHEMIST_K8S_MOUNT_PATH", str(home))
    return KubernetesBackend(api_client=api_client, config=Config())


def job_request(home: Path, owner: str, job_id: str) -> Any:
    """A two-worker job of ``owner`` with its directory under ``home``."""
    from alchemist.backends.api import JobRequest
    from alchemist.job.jobdir import JobDir
    from alchemist.job.spec import JobSpec

    jd = JobDir(home / "jobs" / job_id).create()
    return JobRequest(job_id, owner, JobSpec(name="t", workers=2, backend="kubernetes"), jd)


def job_manifests(
    tenant: Tenant, home: Path, monkeypatch: pytest.MonkeyPatch
) -> list[dict[str, Any]]:
    """The Job and headless Service the real backend would create for ``tenant`` (its
    dry run: no API call)."""
    backend = backend_as(tenant, home, monkeypatch, api_client=object())
    info = backend.dryrun(job_request(home, tenant.name, f"j{tenant.name}0001"))
    return list(info.request["manifests"])


def worker_job(tenant: Tenant, home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The Job the real backend would create for ``tenant`` (its dry run: no API call)."""
    job, _service = job_manifests(tenant, home, monkeypatch)
    return job
