"""Issue 12's attacks against a REAL cluster (marker ``k8s``): alice tries each against
bob and fails. Skips itself unless a cluster answers (the probe of
``test_k8s_cluster.py``) and this identity may create namespaces and
SubjectAccessReviews (a cluster admin's kubeconfig).

What runs, for real: the hub's own code (``alchemist.hub.kubernetes.tenancy``) applies
two users' namespace objects (the chart's default ``tenancy`` values) with server-side
apply through kubernetes-asyncio, as the hub's pre-spawn hook does; a third namespace
stands in for the hub's, with a Secret and a service account like the hub's. Then:

- the API server's RBAC authorizer answers SubjectAccessReviews for alice's notebook
  account (``system:serviceaccount:<alice's namespace>:alchemist-user``) and her worker
  account: attacks 1 to 4 must all be denied, her own Jobs allowed (so the reviews are
  not denying everything);
- Pod Security admission in alice's namespace judges pods by a server-side dry run:
  a privileged pod, a hostPath pod and an inline-NFS pod are refused, a pod hardened as
  Alchemist's workers are is admitted.

Everything the test made is deleted at the end (the three namespaces and the users'
ClusterRole, made here as the chart makes it). Run:
``pytest -m k8s tests/k8s_real/test_k8s_attacks.py``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s_real.test_k8s_cluster import _cluster_client

pytestmark = pytest.mark.k8s

PREFIX = f"alchemist-attack-{os.getpid():x}"
HUB_NS = f"{PREFIX}-hub"
CHART_VALUES = Path(__file__).resolve().parents[2] / "helm" / "alchemist" / "values.yaml"
#: The users' ClusterRole, as the chart makes it (its rules are tenancy.USER_RULES).
USERS_ROLE = f"{PREFIX}-user"


def hub_values() -> dict[str, Any]:
    """The hub config parts ``tenancy.user_objects`` reads, from the chart's defaults."""
    chart = yaml.safe_load(CHART_VALUES.read_text())
    return {
        "hub": {"namespace": HUB_NS},
        "tenancy": {**chart["tenancy"], "userClusterRole": USERS_ROLE},
        "datasets": chart["datasets"],
        "kueue": {"enabled": False},
    }


def user_namespace(user: str) -> str:
    return f"{PREFIX}-{user}"


async def _apply_users(values: dict[str, Any]) -> None:
    from kubernetes_asyncio import client as aclient
    from kubernetes_asyncio import config as aconfig

    from alchemist.hub.kubernetes import tenancy

    cfg = aclient.Configuration()
    try:
        aconfig.load_incluster_config(client_configuration=cfg)
    except aconfig.ConfigException:
        await aconfig.load_kube_config(
            context=os.environ.get("ALCHEMIST_K8S_CONTEXT") or None, client_configuration=cfg
        )
    async with aclient.ApiClient(cfg) as api:
        for user in ("alice", "bob"):
            ns = user_namespace(user)
            tenancy.check_namespace_owner(
                await tenancy.read_object(api, {"kind": "Namespace", "metadata": {"name": ns}}),
                user,
                HUB_NS,
            )
            await tenancy.apply_objects(api, tenancy.user_objects(values, user, ns))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """The users' and the stand-in hub's namespaces on the real cluster; deleted after."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    api = _cluster_client()
    core: Any = client.CoreV1Api(api)
    made: list[str] = []
    try:
        try:
            core.create_namespace({"metadata": {"name": HUB_NS}})
        except ApiException as e:
            if e.status == 403:
                pytest.skip("this identity may not create namespaces (needs a cluster admin)")
            raise
        made.append(HUB_NS)
        core.create_namespaced_secret(
            HUB_NS, {"metadata": {"name": "hub-secret"}, "stringData": {"proxy-token": "x"}}
        )
        core.create_namespaced_service_account(HUB_NS, {"metadata": {"name": "hub"}})
        from alchemist.hub.kubernetes import tenancy

        rbac: Any = client.RbacAuthorizationV1Api(api)
        rbac.create_cluster_role(
            {"metadata": {"name": USERS_ROLE}, "rules": [dict(r) for r in tenancy.USER_RULES]}
        )
        made += [user_namespace("alice"), user_namespace("bob")]
        asyncio.run(_apply_users(hub_values()))
        yield api
    finally:
        for ns in made:
            try:
                core.delete_namespace(ns)
            except ApiException:
                pass
        try:
            client.RbacAuthorizationV1Api(api).delete_cluster_role(USERS_ROLE)
        except ApiException:
            pass
        api.close()


def allowed(
    api: Any, user_ns: str, account: str, verb: str, group: str, resource: str, **attrs: Any
) -> bool:
    """The API server's RBAC answer for a service account of ``user_ns``: may it ``verb``
    ``resource`` (``plural`` or ``plural/subresource``) of API ``group`` ('' = core)?"""
    from kubernetes import client

    plural, _, sub = resource.partition("/")
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{user_ns}:{account}",
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{user_ns}",
                "system:authenticated",
            ],
            "resourceAttributes": {
                "verb": verb,
                "group": group,
                "resource": plural,
                **({"subresource": sub} if sub else {}),
                **attrs,
            },
        },
    }
    try:
        authz: Any = client.AuthorizationV1Api(api)
        out = authz.create_subject_access_review(review)
    except client.ApiException as e:
        if e.status == 403:
            pytest.skip("this identity may not create SubjectAccessReviews")
        raise
    return bool(out.status.allowed)


def alice_can(api: Any, verb: str, group: str, resource: str, **attrs: Any) -> bool:
    """Whether any of alice's identities (notebook or worker account) may do it."""
    ns = user_namespace("alice")
    return any(
        allowed(api, ns, account, verb, group, resource, **attrs)
        for account in ("alchemist-user", "alchemist-worker")
    )


def test_control_alice_may_run_her_own_jobs(cluster: Any) -> None:
    ns = user_namespace("alice")
    assert allowed(cluster, ns, "alchemist-user", "create", "batch", "jobs", namespace=ns)
    assert allowed(cluster, ns, "alchemist-user", "get", "", "pods/log", namespace=ns)


def test_attack_1_alice_cannot_read_bobs_pods(cluster: Any) -> None:
    bob = user_namespace("bob")
    for verb in ("get", "list", "watch"):
        assert not alice_can(cluster, verb, "", "pods", namespace=bob)
        assert not alice_can(cluster, verb, "", "pods")  # across all namespaces
    assert not alice_can(cluster, "create", "", "pods/exec", namespace=bob)


def test_attack_2_alice_cannot_use_the_hub_namespace_or_its_secret(cluster: Any) -> None:
    for group, resource in [("batch", "jobs"), ("", "pods"), ("apps", "deployments")]:
        assert not alice_can(cluster, "create", group, resource, namespace=HUB_NS)
    assert not alice_can(cluster, "get", "", "secrets", namespace=HUB_NS, name="hub-secret")
    assert not alice_can(
        cluster, "create", "", "serviceaccounts/token", namespace=HUB_NS, name="hub"
    )
    for ns in (user_namespace("alice"), HUB_NS):
        assert not alice_can(cluster, "create", "", "secrets", namespace=ns)
        assert not alice_can(cluster, "create", "", "serviceaccounts", namespace=ns)
        assert not alice_can(
            cluster, "create", "rbac.authorization.k8s.io", "rolebindings", namespace=ns
        )
    assert not alice_can(cluster, "patch", "", "namespaces", name=user_namespace("alice"))


def _dry_run_pod(api: Any, ns: str, spec_changes: dict[str, Any]) -> str | None:
    """Create a pod in ``ns`` with a server-side dry run; the refusal message, or None."""
    from kubernetes import client

    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "attack"},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "securityContext": {
                        "runAsUser": 1000,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                    # What the namespace's ResourceQuota asks every pod to state.
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi"},
                        "limits": {"memory": "64Mi"},
                    },
                }
            ],
        },
    }
    container_changes = spec_changes.pop("container", {})
    pod["spec"]["containers"][0]["securityContext"].update(container_changes)
    pod["spec"].update(spec_changes)
    try:
        core: Any = client.CoreV1Api(api)
        core.create_namespaced_pod(ns, pod, dry_run="All")
    except client.ApiException as e:
        return str(e.body)
    return None


def test_attack_2_privileged_host_path_and_nfs_pods_are_refused_in_alices_namespace(
    cluster: Any,
) -> None:
    ns = user_namespace("alice")
    assert _dry_run_pod(cluster, ns, {}) is None  # hardened as Alchemist's pods: admitted
    privileged = {"container": {"privileged": True, "allowPrivilegeEscalation": True}}
    host_path = {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}
    nfs = {"volumes": [{"name": "n", "nfs": {"server": "nfs.example.internal", "path": "/"}}]}
    for changes in (privileged, host_path, nfs):
        refusal = _dry_run_pod(cluster, ns, changes)
        assert refusal is not None and "PodSecurity" in refusal, refusal


def test_attack_3_and_4_alice_cannot_mount_bobs_home_or_index(cluster: Any) -> None:
    """Bob's ALCHEMIST_HOME (alchemist-home) and his index's home claim live in his
    namespace: mounting either needs a pod there, or a claim bound to his volume."""
    bob = user_namespace("bob")
    for group, resource in [("", "pods"), ("batch", "jobs")]:
        assert not alice_can(cluster, "create", group, resource, namespace=bob)
    for ns in (user_namespace("alice"), bob):
        assert not alice_can(cluster, "create", "", "persistentvolumeclaims", namespace=ns)
    assert not alice_can(cluster, "create", "", "persistentvolumes")
    assert not alice_can(cluster, "get", "", "persistentvolumeclaims", namespace=bob)
