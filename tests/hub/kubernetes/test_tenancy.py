"""A namespace per user (``tenancy.mode: namespaces``, the chart's default): what the hub
makes for alice and bob, and what they can and cannot reach.

Real here: the chart rendered by Helm; the hub's code (``configure_kubespawner``,
``tenancy.user_objects``, the pre-spawn hook); KubeSpawner's own pod and claim
manifests; the strict Kubernetes 1.33 schemas (kubernetes-validate; Kueue's from
``tests/helm/kueue_v1beta1.schema.json``); kubernetes-asyncio sending the hook's applies;
the Kubernetes backend building and sending alice's Job over HTTP.
Stand-ins (no API server can run here): the API servers of ``apiserver.py`` (kmock plus
server-side apply) and ``tests/support/k8s_standin.py``; RBAC answered by the
evaluator in ``rbac.py``; the ``restricted`` admission by ``pod_security.py``; the hub
namespace KubeSpawner reads from its pod (``spawning.HUB_NAMESPACE``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from alchemist.hub.kubernetes import tenancy
from tests.hub.kubernetes.pod_security import restricted_violations
from tests.hub.kubernetes.rbac import RBAC, service_account
from tests.hub.kubernetes.spawning import HUB_NAMESPACE, make_spawner
from tests.hub.kubernetes.tenants import (
    DATASET_SETS,
    Cluster,
    Tenant,
    backend_as,
    cluster,
    job_request,
    writable_volumes,
)
from tests.support.kmock_apiserver import api_server

K8S_VERSION = "1.33.0"
KUEUE_SCHEMAS = json.loads(
    (Path(__file__).resolve().parents[2] / "helm" / "kueue_v1beta1.schema.json").read_text()
)["kinds"]
HUB_SA = service_account(HUB_NAMESPACE, "demo-alchemist-hub")
RBAC_GROUP = "rbac.authorization.k8s.io"
#: Server-filled fields, not part of what the hub applies.
SERVER_FIELDS = ("uid", "creationTimestamp", "resourceVersion")


def validate(doc: dict[str, Any]) -> None:
    if doc["apiVersion"].startswith("kueue.x-k8s.io/"):
        jsonschema.validate(doc, KUEUE_SCHEMAS[doc["kind"]])
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.fixture
def two(helm: str, kubeconfig: Path) -> Cluster:
    """alice and bob on the chart's defaults plus one team data set."""
    return cluster(helm, *DATASET_SETS)


@pytest.mark.parametrize(
    "sets",
    [(), DATASET_SETS, ("kueue.enabled=true",)],
    ids=["defaults", "dataset", "kueue"],
)
def test_every_user_object_is_valid_kubernetes(
    helm: str, kubeconfig: Path, sets: tuple[str, ...]
) -> None:
    c = cluster(helm, *sets)
    kinds = set()
    for t in c.users.values():
        for obj in t.objects:
            kinds.add(obj["kind"])
            try:
                validate(obj)
            except Exception as e:  # name the object
                pytest.fail(f"{t.name}'s {obj['kind']}/{obj['metadata']['name']} is invalid: {e}")
        validate(t.pod)
        validate(t.home_claim)
    wanted = {
        "Namespace",
        "ServiceAccount",
        "RoleBinding",
        "PersistentVolumeClaim",
        "ResourceQuota",
        "NetworkPolicy",
    }
    wanted |= {"PersistentVolume"} if sets == DATASET_SETS else set()
    wanted |= {"LocalQueue"} if sets == ("kueue.enabled=true",) else set()
    assert kinds == wanted


def test_each_users_objects_stay_in_that_users_namespace(two: Cluster) -> None:
    alice, bob = two.users["alice"], two.users["bob"]
    assert len({alice.namespace, bob.namespace, HUB_NAMESPACE}) == 3
    assert alice.namespace == f"{HUB_NAMESPACE}-alice"
    for t in (alice, bob):
        for obj in t.objects:
            meta = obj["metadata"]
            if obj["kind"] == "Namespace":
                assert meta["name"] == t.namespace
                assert meta["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
                assert meta["labels"][tenancy.LABEL_USER] == t.name
            elif obj["kind"] == "PersistentVolume":  # cluster-scoped, bound to this user
                assert obj["spec"]["claimRef"]["namespace"] == t.namespace
            else:
                assert meta["namespace"] == t.namespace, obj
        text = json.dumps(t.objects)
        other = bob if t is alice else alice
        assert other.namespace not in text and other.name not in text


def test_notebook_pods_share_no_namespace_account_or_writable_volume(two: Cluster) -> None:
    alice, bob = two.users["alice"], two.users["bob"]
    # A service account is (namespace, name): the same name in two namespaces is two.
    accounts = {t.name: (t.namespace, t.pod["spec"]["serviceAccountName"]) for t in (alice, bob)}
    assert accounts["alice"] != accounts["bob"]
    assert accounts["alice"] == (alice.namespace, tenancy.USER_SERVICE_ACCOUNT)
    a_writes = writable_volumes(alice.pod, alice.namespace)
    b_writes = writable_volumes(bob.pod, bob.namespace)
    assert a_writes and b_writes and not a_writes & b_writes
    assert {(ns, claim) for ns, claim, _ in a_writes} == {
        (alice.namespace, tenancy.HOME_CLAIM),
        (alice.namespace, alice.home_claim["metadata"]["name"]),
    }


def test_notebook_mounts_its_own_homes_and_the_datasets_read_only(two: Cluster) -> None:
    for t in two.users.values():
        volumes = {v["name"]: v for v in t.pod["spec"]["volumes"]}
        mounts = {m["mountPath"]: m for m in t.container["volumeMounts"]}
        claims = {v["persistentVolumeClaim"]["claimName"] for v in volumes.values()}
        # Only claims of the user's own namespace (a pod can name no other).
        assert claims <= t.claims()
        env = t.env
        home = mounts[env["ALCHEMIST_HOME"]]
        assert volumes[home["name"]]["persistentVolumeClaim"] == {"claimName": tenancy.HOME_CLAIM}
        assert not home.get("subPath") and not home.get("readOnly")
        data = mounts["/datasets/imagenet"]
        assert data["readOnly"] is True
        assert volumes[data["name"]]["persistentVolumeClaim"] == {
            "claimName": "dataset-imagenet",
            "readOnly": True,
        }
        (pv,) = t.of_kind("PersistentVolume")
        assert pv["spec"]["nfs"]["readOnly"] is True and pv["spec"]["accessModes"] == [
            "ReadOnlyMany"
        ]


def test_backend_environment_points_at_the_users_own_objects(two: Cluster) -> None:
    for t in two.users.values():
        env = t.env
        accounts = {o["metadata"]["name"]: o for o in t.of_kind("ServiceAccount")}
        claims = {o["metadata"]["name"]: o for o in t.of_kind("PersistentVolumeClaim")}
        assert env["ALCHEMIST_K8S_NAMESPACE"] == t.namespace
        assert claims[env["ALCHEMIST_K8S_PVC"]]["spec"]["accessModes"] == ["ReadWriteMany"]
        assert (
            accounts[env["ALCHEMIST_K8S_SERVICE_ACCOUNT"]]["automountServiceAccountToken"] is False
        )
        assert env["ALCHEMIST_K8S_MOUNT_PATH"] == env["ALCHEMIST_HOME"]
        assert json.loads(env["ALCHEMIST_K8S_DATASETS"]) == [
            {"claim": "dataset-imagenet", "mountPath": "/datasets/imagenet"}
        ]
        assert t.env["JUPYTERHUB_API_TOKEN"] == t.token  # in this pod's spec only


def test_job_index_is_on_the_users_own_read_write_once_home(two: Cluster) -> None:
    """The SQLite index: one writer (the user's notebook pod), a local filesystem (a
    ReadWriteOnce volume is attached to one node), never the shared network claim."""
    for t in two.users.values():
        url = t.env["ALCHEMIST_DB_URL"]
        assert url.startswith("sqlite:///")
        path = url.removeprefix("sqlite:///")
        mounts = {m["mountPath"]: m["name"] for m in t.container["volumeMounts"]}
        (mount,) = [p for p in mounts if path.startswith(p.rstrip("/") + "/")]
        volume = next(v for v in t.pod["spec"]["volumes"] if v["name"] == mounts[mount])
        assert volume["persistentVolumeClaim"]["claimName"] == t.home_claim["metadata"]["name"]
        assert t.home_claim["spec"]["accessModes"] == ["ReadWriteOnce"]
        assert not path.startswith(t.env["ALCHEMIST_HOME"])


@pytest.mark.parametrize("profile", ["cpu", "gpu-1", "gpu-4", "gpu-8"])
def test_notebook_pods_are_hardened_and_fit_the_quota(
    helm: str, kubeconfig: Path, profile: str
) -> None:
    c = cluster(helm, profile=profile)
    for t in c.users.values():
        sc = t.container["securityContext"]
        assert sc["runAsNonRoot"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert restricted_violations(t.pod) == []
        # A compute quota refuses pods that do not say what they ask for.
        (quota,) = t.of_kind("ResourceQuota")
        resources = t.container["resources"]
        for key in quota["spec"]["hard"]:
            kind, _, name = key.partition(".")
            if kind in ("requests", "limits") and "/" not in name:
                assert name in resources.get(kind, {}), f"{profile}: no {key} for the quota"


def test_rbac_alice_may_run_her_jobs_and_nothing_of_anyone_else(two: Cluster) -> None:
    rbac = RBAC(two.objects())
    alice, bob = two.users["alice"], two.users["bob"]
    me = service_account(alice.namespace, tenancy.USER_SERVICE_ACCOUNT)
    mine = alice.namespace
    for verb in ("create", "delete", "get", "list", "watch"):
        assert rbac.can(me, verb, "batch", "jobs", mine)
        assert rbac.can(me, verb, "", "services", mine)
    for verb in ("get", "list", "watch"):
        assert rbac.can(me, verb, "", "pods", mine)
    assert rbac.can(me, "get", "", "pods/log", mine, "j-0")
    for ns in (bob.namespace, HUB_NAMESPACE, None):
        for verb in ("get", "list", "watch", "create", "delete", "patch"):
            for group, resource in [
                ("", "pods"),
                ("", "secrets"),
                ("batch", "jobs"),
                ("", "persistentvolumeclaims"),
                ("", "services"),
                ("", "pods/log"),
                ("", "pods/exec"),
            ]:
                assert not rbac.can(me, verb, group, resource, ns), (verb, resource, ns)
    # Nowhere: secrets, pods made directly, exec, claims, accounts, rights, namespaces.
    for ns in (mine, bob.namespace, HUB_NAMESPACE, None):
        for verb in ("get", "list", "create"):
            assert not rbac.can(me, verb, "", "secrets", ns)
        assert not rbac.can(me, "create", "", "pods", ns)
        assert not rbac.can(me, "create", "", "pods/exec", ns)
        assert not rbac.can(me, "create", "", "persistentvolumeclaims", ns)
        assert not rbac.can(me, "create", "", "serviceaccounts", ns)
        assert not rbac.can(me, "create", "", "serviceaccounts/token", ns)
        for resource in ("roles", "rolebindings", "clusterroles", "clusterrolebindings"):
            for verb in ("create", "patch", "bind", "escalate"):
                assert not rbac.can(me, verb, "rbac.authorization.k8s.io", resource, ns)
    for verb in ("patch", "update", "delete", "create"):
        assert not rbac.can(me, verb, "", "namespaces", None, mine)
        assert not rbac.can(me, verb, "", "persistentvolumes", None)


def test_worker_account_has_no_rights_and_no_token(two: Cluster) -> None:
    rbac = RBAC(two.objects())
    for t in two.users.values():
        worker = service_account(t.namespace, tenancy.WORKER_SERVICE_ACCOUNT)
        assert not rbac.grants_anything(worker)
        (account,) = [
            a for a in t.of_kind("ServiceAccount") if a["metadata"]["name"] == worker.name
        ]
        assert account["automountServiceAccountToken"] is False


def test_hub_may_make_every_user_object_and_spawn_there(two: Cluster) -> None:
    """The chart's ClusterRole covers what the pre-spawn hook applies (get, then apply:
    create or patch) and what KubeSpawner does in user namespaces; it reads no Secret."""
    rbac = RBAC(two.objects())
    plural = {kind: p for kind, (_, p, _) in tenancy._PATHS.items()}
    for t in two.users.values():
        for obj in t.objects:
            group = obj["apiVersion"].rpartition("/")[0]
            ns = obj["metadata"].get("namespace")
            for verb in ("get", "create", "patch"):
                assert rbac.can(HUB_SA, verb, group, plural[obj["kind"]], ns, None), (
                    verb,
                    obj["kind"],
                )
        (binding,) = t.of_kind("RoleBinding")
        role = binding["roleRef"]["name"]
        assert binding["roleRef"]["kind"] == "ClusterRole"
        assert rbac.can(HUB_SA, "bind", RBAC_GROUP, "clusterroles", None, role)
        for verb in ("create", "delete", "get"):
            assert rbac.can(HUB_SA, verb, "", "pods", t.namespace)
            assert rbac.can(HUB_SA, verb, "", "persistentvolumeclaims", t.namespace)
        assert not rbac.can(HUB_SA, "get", "", "secrets", t.namespace)
    # The hub grants only that ClusterRole: it cannot write a Role or ClusterRole of its
    # own, escalate, or bind another role (cluster-admin) anywhere, so it cannot give
    # itself or a user a right it does not hold.
    for ns in (None, HUB_NAMESPACE, "kube-system", two.users["alice"].namespace):
        for resource in ("roles", "clusterroles"):
            for verb in ("create", "patch", "update", "escalate"):
                assert not rbac.can(HUB_SA, verb, RBAC_GROUP, resource, ns), (verb, resource)
        for other in ("cluster-admin", "admin", "edit", HUB_SA.name):
            assert not rbac.can(HUB_SA, "bind", RBAC_GROUP, "clusterroles", ns, other)
            assert not rbac.can(HUB_SA, "bind", RBAC_GROUP, "roles", ns, other)
    # KubeSpawner's reflectors watch pods and events in every namespace.
    for resource in ("pods", "events"):
        for verb in ("list", "watch"):
            assert rbac.can(HUB_SA, verb, "", resource, None)


def test_network_policy_admits_the_namespace_and_the_hub_only(two: Cluster) -> None:
    from tests.hub.kubernetes.netpol import Pod, ingress_allowed

    policies = two.objects()
    labels = two.namespace_labels()
    alice, bob = two.users["alice"], two.users["bob"]
    notebook = Pod(alice.namespace, alice.pod["metadata"]["labels"])
    worker = Pod(alice.namespace, {"app.kubernetes.io/component": "worker"})
    assert ingress_allowed(policies, labels, notebook, worker)  # her notebook → her job
    assert ingress_allowed(policies, labels, worker, worker)  # a job's pods to each other
    for component in ("hub", "proxy"):
        hub = Pod(HUB_NAMESPACE, {"app.kubernetes.io/component": component})
        assert ingress_allowed(policies, labels, hub, notebook)
    assert not ingress_allowed(policies, labels, Pod(HUB_NAMESPACE, {}), notebook)
    for src in (Pod(bob.namespace, bob.pod["metadata"]["labels"]), Pod("default", {})):
        assert not ingress_allowed(policies, labels, src, notebook)
        assert not ingress_allowed(policies, labels, src, worker)


def stripped(obj: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(obj))
    for key in SERVER_FIELDS:
        out["metadata"].pop(key, None)
    if out["kind"] == "Namespace":
        out["metadata"]["labels"].pop("kubernetes.io/metadata.name")
    return out


def test_pre_spawn_hook_applies_the_objects_and_a_second_spawn_converges(
    helm: str, kubeconfig: Path
) -> None:
    """The hook, through KubeSpawner's kubernetes-asyncio client, against the stand-in
    API server (``apiserver.py``: kmock plus server-side apply)."""
    values = cluster(helm, *DATASET_SETS).values

    async def scenario() -> None:
        async with api_server() as (api, url):
            spawners = {u: make_spawner(values, user=u, k8s_api_host=url) for u in ("alice", "bob")}
            for s in spawners.values():
                await s.run_pre_spawn_hook()
            for user, s in spawners.items():
                wanted = tenancy.user_objects(values, user, s.namespace)
                for obj in wanted:
                    meta = obj["metadata"]
                    got = api.stored(
                        tenancy._PATHS[obj["kind"]][1], meta.get("namespace"), meta["name"]
                    )
                    assert got is not None, f"{obj['kind']} {meta['name']} was not applied"
                    assert stripped(got) == obj
            assert {code for _, code in api.applies} == {201}
            first = api.stored_in(spawners["alice"].namespace)
            uids = {o["metadata"]["uid"] for o in first}

            # A second spawn (or a hub restart) applies again: same objects, updated in place.
            count = len(api.applies)
            await spawners["alice"].run_pre_spawn_hook()
            assert {code for _, code in api.applies[count:]} == {200}
            again = api.stored_in(spawners["alice"].namespace)
            assert {o["metadata"]["uid"] for o in again} == uids
            assert sorted(map(json.dumps, map(stripped, again))) == sorted(
                map(json.dumps, map(stripped, first))
            )

            # A chart upgrade that changes the quota converges on the next spawn.
            upgraded = json.loads(json.dumps(values))
            upgraded["tenancy"]["quota"]["requests.nvidia.com/gpu"] = "2"
            await make_spawner(upgraded, user="alice", k8s_api_host=url).run_pre_spawn_hook()
            quota = api.stored("resourcequotas", spawners["alice"].namespace, "alchemist-user")
            assert quota is not None and quota["spec"]["hard"]["requests.nvidia.com/gpu"] == "2"

    asyncio.run(scenario())


def test_charts_pre_spawn_hook_also_applies_the_egress_policy(
    helm: str, kubeconfig: Path, tmp_path: Path
) -> None:
    """The chart's jupyterhub_config.py, run as JupyterHub runs it: a spawn applies the
    user's objects, the NetworkPolicy ``alchemist-egress`` among them (the rules Helm
    rendered: no cloud metadata server), before the notebook pod exists. Against the
    stand-in API server."""
    from tests.support.chart import render, run_hub_config

    scope = run_hub_config(render(helm), tmp_path)
    hook = scope["c"].KubeSpawner.pre_spawn_hook
    values = scope["hub_config"]

    async def scenario() -> None:
        async with api_server() as (api, url):
            spawner = make_spawner(values, user="alice", k8s_api_host=url, pre_spawn_hook=hook)
            await spawner.run_pre_spawn_hook()
            ns = spawner.namespace
            for obj in tenancy.user_objects(values, "alice", ns):
                kind = tenancy._PATHS[obj["kind"]][1]
                assert api.stored(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])
            egress = api.stored("networkpolicies", ns, "alchemist-egress")
            assert egress is not None
            wanted = [
                o
                for o in tenancy.user_objects(values, "alice", ns)
                if o["metadata"]["name"] == tenancy.USER_EGRESS_POLICY
            ]
            assert [stripped(egress)] == wanted
            assert egress["spec"]["policyTypes"] == ["Egress"]
            assert egress["spec"]["podSelector"] == {}
            blocks = [
                peer["ipBlock"]
                for rule in egress["spec"]["egress"]
                for peer in rule.get("to", [])
                if "ipBlock" in peer
            ]
            assert {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]} in blocks
            assert {"cidr": "::/0", "except": ["fd00:ec2::254/128"]} in blocks

    asyncio.run(scenario())


def test_pre_spawn_hook_refuses_a_namespace_that_is_not_the_users(
    helm: str, kubeconfig: Path
) -> None:
    """A user called ``dev`` next to a hub in ``alchemist`` maps to ``alchemist-dev``:
    if that namespace exists (another release's, a team's), the hub must not bind the
    user's Role in it. Likewise a template without {username} never lets bob into the
    namespace made for alice. Against the stand-in API server."""
    values = cluster(helm).values

    async def scenario() -> None:
        async with api_server() as (api, url):
            import kubernetes_asyncio.client as k8s

            async with k8s.ApiClient(k8s.Configuration(host=url)) as client:
                core: Any = k8s.CoreV1Api(client)
                await core.create_namespace({"metadata": {"name": f"{HUB_NAMESPACE}-dev"}})
            dev = make_spawner(values, user="dev", k8s_api_host=url)
            with pytest.raises(tenancy.NamespaceTakenError, match="refusing to take it over"):
                await dev.run_pre_spawn_hook()
            assert api.applies == []

            shared = json.loads(json.dumps(values))
            shared["tenancy"]["namespaceTemplate"] = "team-ml"
            await make_spawner(shared, user="alice", k8s_api_host=url).run_pre_spawn_hook()
            count = len(api.applies)
            with pytest.raises(tenancy.NamespaceTakenError, match="user 'bob'"):
                await make_spawner(shared, user="bob", k8s_api_host=url).run_pre_spawn_hook()
            assert len(api.applies) == count
            binding = api.stored("rolebindings", "team-ml", tenancy.USER_SERVICE_ACCOUNT)
            assert binding is not None and "bob" not in json.dumps(binding)

    asyncio.run(scenario())


def test_backend_jobs_as_alice_carry_her_namespace_claim_and_worker_account(
    two: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real KubernetesBackend, configured by exactly the ALCHEMIST_* environment of
    alice's notebook pod, submits a job to the stand-in API server of
    tests/backends/kubernetes/k8s_standin.py. One substitution: ALCHEMIST_HOME (the mount path of
    her claim) is a temporary directory here, since no volume is mounted."""
    from tests.support.k8s_standin import StandinApiServer

    alice: Tenant = two.users["alice"]
    env = alice.env
    home = tmp_path / "alice-home"
    with StandinApiServer(namespaces=(alice.namespace,)) as server:
        backend = backend_as(alice, home, monkeypatch, server.api_client())
        try:
            backend.submit(job_request(home, "alice", "jalice0001"))
        finally:
            backend.api_client.close()
        jobs = server.list("jobs", alice.namespace)
        services = server.list("services", alice.namespace)
    assert len(jobs) == 1 and len(services) == 1
    (job,) = jobs
    assert job["metadata"]["namespace"] == alice.namespace
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == tenancy.WORKER_SERVICE_ACCOUNT
    claims = {
        v["name"]: v["persistentVolumeClaim"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    (container,) = pod["containers"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    writable = {
        claims[n]["claimName"] for n, m in mounts.items() if n in claims and not m.get("readOnly")
    }
    assert writable == {tenancy.HOME_CLAIM}
    read_only = {
        claims[n]["claimName"] for n, m in mounts.items() if n in claims and m.get("readOnly")
    }
    assert read_only == {"dataset-imagenet"}
    assert all(c.get("readOnly") for c in claims.values() if c["claimName"] != tenancy.HOME_CLAIM)
    assert not any("hostPath" in v for v in pod["volumes"])
    assert not container["securityContext"].get("privileged")
    assert restricted_violations(job) == []
    # What the quota needs from every pod, and the notebook's own uid.
    resources = container["resources"]
    assert {"cpu", "memory"} <= set(resources["requests"]) and "memory" in resources["limits"]
    assert pod["securityContext"]["runAsUser"] == int(env["ALCHEMIST_K8S_RUN_AS_USER"])
    assert env["ALCHEMIST_HOME"] == "/mnt/alchemist"  # what backend_as substitutes
