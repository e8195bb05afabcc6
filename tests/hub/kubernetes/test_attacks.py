"""Issue 12's attacks, each as "alice tries X against bob and fails", on the chart's
defaults (``tenancy.mode: namespaces``), and what ``tenancy.mode: shared`` leaves open.

Real here: the chart rendered by Helm, the hub's code (``tenancy.user_objects``,
``configure_kubespawner``), KubeSpawner's own notebook pod and home-claim manifests,
and the Kubernetes backend's own worker Job (its dry run, configured by alice's pod
environment). Stand-ins, as no cluster can run here: what the API server would
authorize is answered by the RBAC evaluator (``rbac.py``), what Pod Security admission
would refuse in a ``restricted`` namespace by ``pod_security.py``, what the network
plugin would drop by ``netpol.py``; each evaluator is tested on its own. The same list
runs against a real cluster in ``tests/k8s_real/test_k8s_attacks.py`` (skipped here).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from alchemist.hub.kubernetes import tenancy
from tests.hub.kubernetes.netpol import Pod, ingress_allowed
from tests.hub.kubernetes.pod_security import restricted_violations
from tests.hub.kubernetes.rbac import RBAC, Subject, service_account
from tests.hub.kubernetes.spawning import HUB_NAMESPACE
from tests.hub.kubernetes.tenants import (
    DATASET_SETS,
    Cluster,
    Tenant,
    cluster,
    worker_job,
    writable_volumes,
)
from tests.support.chart import find

#: Where a pod can be made from (directly or through a workload).
WORKLOADS = [
    ("", "pods"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("apps", "replicasets"),
    ("", "replicationcontrollers"),
]


@pytest.fixture
def two(helm: str, kubeconfig: Path) -> Cluster:
    return cluster(helm)


def notebook_sa(t: Tenant) -> Subject:
    return service_account(t.namespace, t.pod["spec"]["serviceAccountName"])


def alice_identities(c: Cluster) -> list[Subject]:
    """Every identity alice's code can hold: her notebook's account and her workers'."""
    alice = c.users["alice"]
    return [notebook_sa(alice), service_account(alice.namespace, tenancy.WORKER_SERVICE_ACCOUNT)]


def namespaces_alice_can_run_pods_in(c: Cluster, rbac: RBAC) -> set[str]:
    every = {HUB_NAMESPACE, *(t.namespace for t in c.users.values()), "default", "kube-system"}
    return {
        ns
        for ns in every
        for who in alice_identities(c)
        for group, resource in WORKLOADS
        if rbac.can(who, "create", group, resource, ns)
    }


def test_alice_cannot_read_bobs_hub_token_from_his_pod_spec(two: Cluster) -> None:
    """Attack 1: bob's JUPYTERHUB_API_TOKEN is in his notebook pod's spec; reading it
    needs get/list/watch on pods in bob's namespace (or across all), and starting a
    kernel with it needs his server reachable."""
    alice, bob = two.users["alice"], two.users["bob"]
    assert bob.env["JUPYTERHUB_API_TOKEN"] == bob.token  # the prize is in his pod
    rbac = RBAC(two.objects())
    for who in alice_identities(two):
        for ns in (bob.namespace, None):
            for verb in ("get", "list", "watch"):
                assert not rbac.can(who, verb, "", "pods", ns, bob.pod["metadata"]["name"])
            for sub in ("pods/exec", "pods/attach", "pods/portforward", "pods/proxy"):
                for verb in ("get", "create"):
                    assert not rbac.can(who, verb, "", sub, ns)
    # Nothing alice can read holds it: her namespace's objects and her own pod.
    assert bob.token not in repr([*alice.objects, alice.pod])
    # Nor can her pods reach his server to use it (the proxy, in the hub namespace, asks
    # the hub for a login first).
    labels = two.namespace_labels()
    bob_notebook = Pod(bob.namespace, bob.pod["metadata"]["labels"])
    for src in (
        Pod(alice.namespace, alice.pod["metadata"]["labels"]),
        Pod(alice.namespace, {"app.kubernetes.io/component": "worker"}),
    ):
        assert not ingress_allowed(two.objects(), labels, src, bob_notebook)


def test_alice_cannot_run_anything_in_the_hub_namespace(two: Cluster) -> None:
    """Attack 2a: a Job (or any pod) in the namespace of the hub's Secret, account and
    database: alice may create pods, through Jobs, in her own namespace only."""
    rbac = RBAC(two.objects())
    assert namespaces_alice_can_run_pods_in(two, rbac) == {two.users["alice"].namespace}
    (secret,) = find(two.docs, "Secret", "-hub-secret")
    assert secret["metadata"]["namespace"] == HUB_NAMESPACE


def test_alice_cannot_mount_the_hub_secret_or_run_as_the_hub_account(two: Cluster) -> None:
    """Attack 2b/2c: a pod's secret volumes and service account are looked up in the
    pod's own namespace. Alice's pods run only in hers, which holds no Secret of the
    hub and no account but her two (whose rights are hers); she can create neither."""
    alice = two.users["alice"]
    rbac = RBAC(two.objects())
    (secret,) = find(two.docs, "Secret", "-hub-secret")
    (hub_deploy,) = find(two.docs, "Deployment", "-hub")
    hub_account = hub_deploy["spec"]["template"]["spec"]["serviceAccountName"]
    assert not any(o["kind"] == "Secret" for o in alice.objects)
    accounts = {o["metadata"]["name"] for o in alice.of_kind("ServiceAccount")}
    assert accounts == {tenancy.USER_SERVICE_ACCOUNT, tenancy.WORKER_SERVICE_ACCOUNT}
    assert hub_account not in accounts
    for who in alice_identities(two):
        for ns in (alice.namespace, HUB_NAMESPACE, None):
            for verb in ("get", "list", "create", "patch"):
                assert not rbac.can(who, verb, "", "secrets", ns, secret["metadata"]["name"])
                assert not rbac.can(who, verb, "", "serviceaccounts", ns, hub_account)
            assert not rbac.can(who, "create", "", "serviceaccounts/token", ns, hub_account)
            assert not rbac.can(who, "impersonate", "", "serviceaccounts", ns, hub_account)


def test_alice_cannot_mount_bobs_claim(
    two: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack 2d: claims are namespaced, and alice can neither run pods outside her
    namespace nor make a claim or volume that would bind to bob's storage."""
    alice, bob = two.users["alice"], two.users["bob"]
    rbac = RBAC(two.objects())
    mountable = {(alice.namespace, claim) for claim in alice.claims()}
    bobs = {(bob.namespace, claim) for claim in bob.claims()}
    assert not mountable & bobs
    for who in alice_identities(two):
        for ns in (alice.namespace, bob.namespace, None):
            for verb in ("create", "patch", "update"):
                assert not rbac.can(who, verb, "", "persistentvolumeclaims", ns)
                assert not rbac.can(who, verb, "", "persistentvolumes", None)
    # Alice's own pods, notebook and workers, write only her claims.
    job = worker_job(alice, tmp_path / "alice", monkeypatch)
    for pod in (alice.pod, job["spec"]["template"]):
        writes = {(ns, claim) for ns, claim, _ in writable_volumes(pod, alice.namespace)}
        assert writes and writes <= mountable


def test_alice_cannot_run_a_privileged_or_host_path_pod(
    two: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack 2e: her namespace enforces the ``restricted`` standard, which refuses a
    privileged container and a hostPath volume, while Alchemist's own notebook and
    worker pods pass it; and she cannot relabel her namespace to lift it."""
    alice = two.users["alice"]
    (namespace,) = alice.of_kind("Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    job = worker_job(alice, tmp_path / "alice", monkeypatch)
    assert job["metadata"]["namespace"] == alice.namespace
    assert restricted_violations(job) == []
    assert restricted_violations(alice.pod) == []

    privileged = copy.deepcopy(job)
    spec = privileged["spec"]["template"]["spec"]
    spec["containers"][0]["securityContext"] = {"privileged": True}
    assert any("privileged" in v for v in restricted_violations(privileged))
    host_root = copy.deepcopy(job)
    spec = host_root["spec"]["template"]["spec"]
    spec["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    spec["containers"][0]["volumeMounts"].append({"name": "host", "mountPath": "/host"})
    assert "volume 'host' is hostPath" in restricted_violations(host_root)

    rbac = RBAC(two.objects())
    for who in alice_identities(two):
        for verb in ("patch", "update", "delete"):
            assert not rbac.can(who, verb, "", "namespaces", None, alice.namespace)


def bob_home(bob: Tenant) -> tuple[str, str]:
    """(namespace, claim) holding bob's ALCHEMIST_HOME: outputs.pkl, checkpoints."""
    mounts = {m["mountPath"]: m["name"] for m in bob.container["volumeMounts"]}
    volume = next(
        v for v in bob.pod["spec"]["volumes"] if v["name"] == mounts[bob.env["ALCHEMIST_HOME"]]
    )
    return bob.namespace, volume["persistentVolumeClaim"]["claimName"]


@pytest.mark.parametrize("sets", [(), DATASET_SETS], ids=["defaults", "dataset"])
def test_alice_cannot_write_bobs_outputs_or_checkpoints(
    helm: str,
    kubeconfig: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sets: tuple[str, ...],
) -> None:
    """Attack 3: bob's kernel and restarted workers unpickle files of his ALCHEMIST_HOME.
    No volume alice can mount holds it: it is a claim in bob's namespace; hers are in
    hers; a volume by address (inline nfs, hostPath) is refused by ``restricted``; and
    the team data sets are read-only (claim, volume and NFS export)."""
    c = cluster(helm, *sets)
    alice, bob = c.users["alice"], c.users["bob"]
    target = bob_home(bob)
    # Bob's workers mount the same claim at the same path as his notebook.
    bob_job = worker_job(bob, tmp_path / "bob", monkeypatch)
    bob_claims = {
        (bob.namespace, v["persistentVolumeClaim"]["claimName"])
        for v in bob_job["spec"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert target in bob_claims
    mountable = {(alice.namespace, claim) for claim in alice.claims()}
    assert target not in mountable
    alice_job = worker_job(alice, tmp_path / "alice", monkeypatch)
    by_address = copy.deepcopy(alice_job)
    by_address["spec"]["template"]["spec"]["volumes"].append(
        {"name": "bobs", "nfs": {"server": "nfs.example.internal", "path": "/"}}
    )
    assert "volume 'bobs' is nfs" in restricted_violations(by_address)
    for pv in alice.of_kind("PersistentVolume"):
        assert pv["spec"]["nfs"]["readOnly"] is True
        assert pv["spec"]["claimRef"]["namespace"] == alice.namespace
    for pod in (alice.pod, alice_job["spec"]["template"]):
        for ns, claim, _ in writable_volumes(pod, alice.namespace):
            assert not claim.startswith("dataset-")
            assert (ns, claim) != target


def test_alice_cannot_corrupt_bobs_or_everyones_job_index(two: Cluster) -> None:
    """Attack 4: each index is a SQLite file on that user's own ReadWriteOnce home (one
    writer, one node, a local filesystem), not on the shared network claim, and no
    other user can mount that home."""
    places = {}
    for t in two.users.values():
        path = t.env["ALCHEMIST_DB_URL"].removeprefix("sqlite:///")
        mounts = {m["mountPath"]: m["name"] for m in t.container["volumeMounts"]}
        (mount,) = [p for p in mounts if path.startswith(p.rstrip("/") + "/")]
        volume = next(v for v in t.pod["spec"]["volumes"] if v["name"] == mounts[mount])
        claim = volume["persistentVolumeClaim"]["claimName"]
        assert claim == t.home_claim["metadata"]["name"]
        assert t.home_claim["spec"]["accessModes"] == ["ReadWriteOnce"]
        assert claim != tenancy.HOME_CLAIM  # not the ReadWriteMany claim workers mount
        places[t.name] = (t.namespace, claim)
    assert places["alice"] != places["bob"]
    alice = two.users["alice"]
    assert places["bob"] not in {(alice.namespace, c) for c in alice.claims()}


def test_shared_mode_protects_only_the_index(helm: str, kubeconfig: Path) -> None:
    """``tenancy.mode: shared`` is for one team whose members trust each other: these
    assertions document what it does NOT protect (attacks 1 to 3), so that nobody
    mistakes it for isolation; only the job index is each user's own."""
    c = cluster(helm, "tenancy.mode=shared")
    alice, bob = c.users["alice"], c.users["bob"]
    rbac = RBAC(c.docs)
    me = notebook_sa(alice)
    # One namespace, one account for everyone: the hub's own namespace by default.
    assert alice.namespace == bob.namespace == HUB_NAMESPACE
    assert notebook_sa(alice) == notebook_sa(bob)
    # 1: alice may read bob's pod spec, token included.
    assert rbac.can(me, "get", "", "pods", bob.namespace, bob.pod["metadata"]["name"])
    # 2: she may create Jobs where the hub's Secret lives (no restricted admission).
    (secret,) = find(c.docs, "Secret", "-hub-secret")
    assert rbac.can(me, "create", "batch", "jobs", secret["metadata"]["namespace"])
    # 3: both write the same claim at the same path: one ALCHEMIST_HOME for everyone.
    shared = writable_volumes(alice.pod, alice.namespace) & writable_volumes(bob.pod, bob.namespace)
    assert (
        alice.namespace,
        find(c.docs, "PersistentVolumeClaim", "-shared")[0]["metadata"]["name"],
        "",
    ) in shared
    assert alice.env["ALCHEMIST_HOME"] == bob.env["ALCHEMIST_HOME"]
    # 4 is the one attack shared mode blunts: each index is on its user's own home claim
    # (ReadWriteOnce, one writer), not in the ALCHEMIST_HOME everyone shares.
    for t in (alice, bob):
        assert t.env["ALCHEMIST_DB_URL"].startswith("sqlite:////home/jovyan/.alchemist/")
        assert not t.env["ALCHEMIST_DB_URL"].startswith(f"sqlite:///{t.env['ALCHEMIST_HOME']}/")
    assert alice.home_claim["metadata"]["name"] != bob.home_claim["metadata"]["name"]
    assert alice.home_claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    # And no NetworkPolicy, no per-user quota, no Pod Security labels.
    assert not find(c.docs, "NetworkPolicy") and not find(c.docs, "ResourceQuota")
    assert not find(c.docs, "Namespace")


def test_hardened_pods_hold_in_shared_mode_too(helm: str, kubeconfig: Path) -> None:
    """What shared mode still gives: hardened notebook pods (the same security context)."""
    c = cluster(helm, "tenancy.mode=shared")
    for t in c.users.values():
        assert restricted_violations(t.pod) == []
