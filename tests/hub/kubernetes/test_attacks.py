"""Issue 12's attacks, each as "alice tries X against bob and fails", on the chart's
defaults (``tenancy.mode: namespaces``), and what ``tenancy.mode: shared`` leaves open.

Real here: the chart rendered by Helm, the hub's code (``tenancy.user_objects``,
``configure_kubespawner``), KubeSpawner's own notebook pod and home-claim manifests,
and the Kubernetes backend's own worker Job (its dry run, configured by alice's pod
environment). Stand-ins, as no cluster can run here: what the API server would
authorize is answered by the RBAC evaluator (``rbac.py``), what Pod Security admission
would refuse in a ``restricted`` namespace by ``pod_security.py``, what the network
plugin would drop by ``netpol.py``, what the chart's ValidatingAdmissionPolicies would
refuse by ``admission.py`` (their CEL expressions evaluated by the CEL subset of
``cel.py``); each evaluator is tested on its own. Issue 12's list runs against a real
cluster in ``tests/k8s_real/test_k8s_attacks.py`` (skipped here); issue 33's (Services,
the metadata server, the release namespace, the hub's reach) are the tests below
``test_hardened_pods_hold_in_shared_mode_too``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from alchemist.hub.kubernetes import tenancy
from tests.hub.kubernetes.admission import Request, admit, create
from tests.hub.kubernetes.netpol import Pod, connection_allowed, egress_allowed, ingress_allowed
from tests.hub.kubernetes.pod_security import restricted_violations
from tests.hub.kubernetes.rbac import RBAC, Subject, service_account
from tests.hub.kubernetes.spawning import HUB_NAMESPACE
from tests.hub.kubernetes.tenants import (
    DATASET_SETS,
    Cluster,
    Tenant,
    cluster,
    job_manifests,
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


def pod_of(t: Tenant) -> Pod:
    """The user's notebook pod, for the network policy evaluator."""
    return Pod(t.namespace, t.pod["metadata"]["labels"])


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
    # And no policy between users' pods, no per-user quota, no Pod Security labels.
    labels = c.namespace_labels()
    assert connection_allowed(
        c.docs, labels, Pod(bob.namespace, bob.pod["metadata"]["labels"]), pod_of(alice), 8888
    )
    assert not find(c.docs, "ResourceQuota") and not find(c.docs, "Namespace")


def test_hardened_pods_hold_in_shared_mode_too(helm: str, kubeconfig: Path) -> None:
    """What shared mode still gives: hardened notebook pods (the same security context)."""
    c = cluster(helm, "tenancy.mode=shared")
    for t in c.users.values():
        assert restricted_violations(t.pod) == []


# Issue 33: Services, the cloud metadata server, the release namespace, the hub's reach.

#: The cloud metadata server (instance credentials), IPv4 and AWS's IPv6 address.
METADATA = ("169.254.169.254", "fd00:ec2::254")
#: Addresses a notebook legitimately reaches: a package index on the internet (IPv4,
#: IPv6) and the API server's endpoint (a node address).
ELSEWHERE = ("203.0.113.7", "2001:db8::7", "10.0.0.1")
MODES = {"namespaces": (), "shared": ("tenancy.mode=shared",)}


def service(namespace: str, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "mine", "namespace": namespace},
        "spec": {"ports": [{"port": 80}], **spec},
    }


@pytest.mark.parametrize("mode", sorted(MODES))
def test_alice_cannot_publish_a_service_or_capture_traffic_with_external_ips(
    helm: str, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Alice may create Services (each job's rendezvous is one), so the chart's
    ValidatingAdmissionPolicy refuses, in her namespace, a Service with ``externalIPs``
    (it would capture that address's traffic from every pod and node, CVE-2020-8554) and
    any type but ClusterIP (a LoadBalancer or NodePort publishes her pods outside the
    cluster; ExternalName aliases any host). No API server runs here: the rendered
    policy's CEL expressions are evaluated by a stand-in (``admission.py``, ``cel.py``)."""
    c = cluster(helm, *MODES[mode])
    alice = c.users["alice"]
    me, ns, labels = notebook_sa(alice), alice.namespace, c.namespace_labels()
    rbac = RBAC(c.objects())
    assert rbac.can(me, "create", "", "services", ns)  # she needs them: RBAC allows

    def refused(svc: dict[str, object], op: str = "CREATE", old: object = None) -> list[str]:
        req = create(svc, me, "services")
        if op == "UPDATE":
            req = Request("UPDATE", "", "services", ns, me, object=svc, old_object=old)
        return admit(c.objects(), labels, req)

    _job, rendezvous = job_manifests(alice, tmp_path / "alice", monkeypatch)
    assert rendezvous["spec"]["clusterIP"] == "None"
    assert refused(rendezvous) == []  # the backend's own headless Service
    assert refused(service(ns, type="ClusterIP")) == []
    assert refused(service(ns)) == []  # no type: the API server defaults ClusterIP
    hijack = service(ns, type="ClusterIP", externalIPs=["10.0.0.1"])
    assert any("externalIPs" in m for m in refused(hijack))
    for kind in ("LoadBalancer", "NodePort", "ExternalName"):
        assert any("must be ClusterIP" in m for m in refused(service(ns, type=kind))), kind
    # Nor by changing a Service she already has.
    assert any(
        "externalIPs" in m for m in refused(hijack, op="UPDATE", old=service(ns, type="ClusterIP"))
    )
    # The chart's own public Service (proxy.service.type) is the admin's, not refused.
    proxy = find(render_for(helm, mode, "proxy.service.type=LoadBalancer"), "Service", "-public")
    admin = Subject("User", "cluster-admin")
    assert admit(c.objects(), labels, create(proxy[0], admin, "services")) == []


def render_for(helm: str, mode: str, *sets: str) -> list[dict[str, object]]:
    from tests.support.chart import render

    return render(helm, sets=(*MODES[mode], *sets))


@pytest.mark.parametrize("mode", sorted(MODES))
def test_alices_pods_cannot_reach_the_cloud_metadata_server(
    helm: str, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """169.254.169.254 (and fd00:ec2::254) hands out the node's cloud credentials to
    whoever asks. The egress policy of her namespace (applied by the chart's pre-spawn
    hook; in shared mode the chart's own) drops her notebook's and workers' connections
    to it, while they still reach each other, DNS, the hub's API, the API server and the
    internet. What a network plugin would drop is answered by ``netpol.py``."""
    c = cluster(helm, *MODES[mode])
    alice, bob = c.users["alice"], c.users["bob"]
    policies, labels = c.objects(), c.namespace_labels()
    job = worker_job(alice, tmp_path / "alice", monkeypatch)
    worker = Pod(alice.namespace, job["spec"]["template"]["metadata"]["labels"])
    hub = Pod(HUB_NAMESPACE, hub_pod_labels(c))
    dns = Pod("kube-system", {"k8s-app": "kube-dns"})
    for src in (pod_of(alice), worker):
        for address in METADATA:
            for port in (80, 443, 53):
                assert not egress_allowed(policies, labels, src, address, port), (address, port)
        for address in ELSEWHERE:
            assert egress_allowed(policies, labels, src, address, 443), address
        assert egress_allowed(policies, labels, src, dns, 53, "UDP")
        assert egress_allowed(policies, labels, src, dns, 53, "TCP")
    assert connection_allowed(policies, labels, pod_of(alice), worker, 29500)
    assert connection_allowed(policies, labels, worker, worker, 29500)
    assert connection_allowed(policies, labels, pod_of(alice), hub, 8081)
    if mode == "namespaces":  # bob's own ingress policy still drops her
        assert not connection_allowed(policies, labels, pod_of(alice), pod_of(bob), 8888)

    # networkPolicy.egress.allowAddresses=false: the namespace, DNS and the hub only.
    closed = cluster(helm, *MODES[mode], "networkPolicy.egress.allowAddresses=false")
    policies = closed.objects()
    alice = closed.users["alice"]
    for address in (*METADATA, *ELSEWHERE):
        assert not egress_allowed(policies, labels, pod_of(alice), address, 443)
    assert egress_allowed(policies, labels, pod_of(alice), dns, 53, "UDP")
    assert connection_allowed(policies, labels, pod_of(alice), hub, 8081)


def hub_pod_labels(c: Cluster) -> dict[str, str]:
    (deploy,) = find(c.docs, "Deployment", "-hub")
    return dict(deploy["spec"]["template"]["metadata"]["labels"])


def proxy_pod_labels(c: Cluster) -> dict[str, str]:
    (deploy,) = find(c.docs, "Deployment", "-proxy")
    return dict(deploy["spec"]["template"]["metadata"]["labels"])


@pytest.mark.parametrize("mode", sorted(MODES))
def test_hub_and_proxy_accept_only_their_clients(
    helm: str, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The release namespace holds the hub (its API and database) and the proxy (its
    routing table API). The hub accepts the proxy and the users' notebook servers (their
    API calls); the proxy's public port accepts anyone, its API (8001: whoever holds it
    reroutes every user) the hub only."""
    c = cluster(helm, *MODES[mode])
    alice = c.users["alice"]
    policies, labels = c.objects(), c.namespace_labels()
    hub = Pod(HUB_NAMESPACE, hub_pod_labels(c))
    proxy = Pod(HUB_NAMESPACE, proxy_pod_labels(c))
    job = worker_job(alice, tmp_path / "alice", monkeypatch)
    worker = Pod(alice.namespace, job["spec"]["template"]["metadata"]["labels"])
    strangers: list[Pod | str] = [
        "203.0.113.7",
        Pod("default", {}),
        Pod("kube-system", {}),
        Pod(HUB_NAMESPACE, {"app": "something-else"}),
    ]
    # The hub: from the proxy and notebooks, on its port only.
    assert ingress_allowed(policies, labels, proxy, hub, 8081)
    assert connection_allowed(policies, labels, pod_of(alice), hub, 8081)
    assert not ingress_allowed(policies, labels, proxy, hub, 5432)
    for src in [*strangers, worker]:
        assert not ingress_allowed(policies, labels, src, hub, 8081), src
    # The proxy: its public port from anywhere, its API from the hub only.
    for src in [*strangers, pod_of(alice), worker, hub]:
        assert ingress_allowed(policies, labels, src, proxy, 8000), src
    assert connection_allowed(policies, labels, hub, proxy, 8001)
    for src in [*strangers, pod_of(alice), worker]:
        assert not ingress_allowed(policies, labels, src, proxy, 8001), src


def namespace_object(name: str, labels: dict[str, str]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def test_a_compromised_hub_cannot_run_pods_or_bind_roles_outside_user_namespaces(
    two: Cluster,
) -> None:
    """The hub's ClusterRole must be cluster-wide (RBAC cannot name "the namespaces I
    made", and a new namespace has no RoleBinding yet), so the chart's admission policy
    confines its writes: whoever takes the hub over cannot create a pod, a claim or a
    RoleBinding in kube-system, default or its own namespace, adopt or relabel a
    namespace it did not make, make one without the ``restricted`` standard, or make a
    host-path volume; in the users' namespaces it still does all of its job. What the API
    server would authorize is answered by ``rbac.py``, what its admission would refuse by
    ``admission.py``/``cel.py``."""
    rbac = RBAC(two.objects())
    (hub_deploy,) = find(two.docs, "Deployment", "-hub")
    hub = service_account(
        HUB_NAMESPACE, hub_deploy["spec"]["template"]["spec"]["serviceAccountName"]
    )
    labels = {**two.namespace_labels(), "kube-system": {}, "default": {}}
    verbs = {"CREATE": "create", "UPDATE": "patch", "DELETE": "delete"}

    def succeeds(req: Request) -> bool:
        verb = verbs[req.operation]
        namespace = req.namespace if req.namespaced and req.resource != "namespaces" else None
        return rbac.can(hub, verb, req.group, req.resource, namespace, req.name or None) and not (
            admit(two.objects(), labels, req)
        )

    def in_ns(obj: dict[str, object], ns: str) -> dict[str, object]:
        out = copy.deepcopy(obj)
        out["metadata"]["namespace"] = ns
        return out

    alice = two.users["alice"]
    pod = in_ns(alice.pod, "kube-system")
    binding = next(iter(alice.of_kind("RoleBinding")))
    to_itself = in_ns(binding, "kube-system")
    to_itself["subjects"] = [
        {"kind": "ServiceAccount", "name": hub.name, "namespace": HUB_NAMESPACE}
    ]
    for ns in ("kube-system", "default", HUB_NAMESPACE):
        # RBAC alone would let it (the hole of issue 33); admission refuses.
        assert rbac.can(hub, "create", "", "pods", ns)
        assert rbac.can(hub, "create", "rbac.authorization.k8s.io", "rolebindings", ns)
        assert not succeeds(create(in_ns(alice.pod, ns), hub, "pods"))
        assert not succeeds(create(in_ns(to_itself, ns), hub, "rolebindings"))
        assert not succeeds(create(in_ns(alice.home_claim, ns), hub, "persistentvolumeclaims"))
        assert not succeeds(
            Request("DELETE", "", "pods", ns, hub, old_object=in_ns(pod, ns), name="p")
        )
        # Nor adopt the namespace by labelling it as one of its users'.
        (alice_ns,) = alice.of_kind("Namespace")
        adopted = namespace_object(ns, dict(alice_ns["metadata"]["labels"]))
        req = Request(
            "UPDATE",
            "",
            "namespaces",
            ns,
            hub,
            object=adopted,
            old_object=namespace_object(ns, {}),
            name=ns,
            namespaced=False,
        )
        assert not succeeds(req)
    # No namespace of its own without the restricted standard or its label.
    (alice_ns,) = alice.of_kind("Namespace")
    for drop in ("pod-security.kubernetes.io/enforce", tenancy.LABEL_HUB):
        ns_labels = {k: v for k, v in alice_ns["metadata"]["labels"].items() if k != drop}
        assert not succeeds(
            create(
                namespace_object("alchemist-eve", ns_labels), hub, "namespaces", namespaced=False
            )
        )
    # No host-path volume to hand a user's claim.
    host = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "host-root"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": "/"},
        },
    }
    assert not succeeds(create(host, hub, "persistentvolumes", namespaced=False))
    # Nor any other cluster-scoped write, nor binding another role.
    assert not rbac.can(hub, "create", "rbac.authorization.k8s.io", "clusterrolebindings", None)
    for role in ("cluster-admin", "admin", "edit"):
        assert not rbac.can(hub, "bind", "rbac.authorization.k8s.io", "clusterroles", None, role)

    # Its job, in each user's namespace: every object of the pre-spawn hook (created, then
    # re-applied), the notebook pod and its home claim, deleting them at stop.
    for t in two.users.values():
        for obj in t.objects:
            namespaced = obj["kind"] not in ("Namespace", "PersistentVolume")
            plural = tenancy._PATHS[obj["kind"]][1]
            first = create(obj, hub, plural, namespaced=namespaced)
            assert succeeds(first), (obj["kind"], admit(two.objects(), labels, first))
            again = Request(
                "UPDATE",
                first.group,
                plural,
                first.namespace,
                hub,
                object=obj,
                old_object=obj,
                version=first.version,
                name=first.name,
                namespaced=namespaced,
            )
            assert succeeds(again), obj["kind"]
        # (KubeSpawner's manifests carry no namespace: it posts them to the user's.)
        assert succeeds(create(in_ns(t.pod, t.namespace), hub, "pods"))
        assert succeeds(create(in_ns(t.home_claim, t.namespace), hub, "persistentvolumeclaims"))
        for resource, obj in (("pods", t.pod), ("persistentvolumeclaims", t.home_claim)):
            name = obj["metadata"]["name"]
            assert succeeds(
                Request("DELETE", "", resource, t.namespace, hub, old_object=obj, name=name)
            )
