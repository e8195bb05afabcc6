"""The RBAC evaluator (``rbac.py``) itself, checked against RBAC's documented semantics.

Everything here is the evaluator run on hand-written objects: no API server is involved
(none can run here). Each case is a rule of the Kubernetes RBAC reference the tenancy
and attack tests rely on; a wrong oracle would make those tests meaningless.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.hub.kubernetes.rbac import RBAC, RBACError, Subject, rule_allows, service_account

RBAC_V1 = "rbac.authorization.k8s.io/v1"


def role(ns: str, name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_V1,
        "kind": "Role",
        "metadata": {"name": name, "namespace": ns},
        "rules": list(rules),
    }


def cluster_role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_V1,
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": list(rules),
    }


def binding(
    ns: str | None, ref_kind: str, ref_name: str, *subjects: dict[str, Any]
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"bind-{ref_name}"}
    if ns is not None:
        meta["namespace"] = ns
    return {
        "apiVersion": RBAC_V1,
        "kind": "RoleBinding" if ns is not None else "ClusterRoleBinding",
        "metadata": meta,
        "subjects": list(subjects),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind, "name": ref_name},
    }


def sa(ns: str, name: str) -> dict[str, Any]:
    return {"kind": "ServiceAccount", "name": name, "namespace": ns}


ALICE = service_account("a", "user")
JOBS = {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "create"]}


def test_a_role_binding_grants_its_roles_rules_in_its_namespace_only() -> None:
    rbac = RBAC([role("a", "r", JOBS), binding("a", "Role", "r", sa("a", "user"))])
    assert rbac.can(ALICE, "create", "batch", "jobs", "a")
    assert not rbac.can(ALICE, "create", "batch", "jobs", "b")  # another namespace
    assert not rbac.can(ALICE, "create", "batch", "jobs", None)  # across all namespaces
    assert not rbac.can(ALICE, "delete", "batch", "jobs", "a")  # a verb not listed
    assert not rbac.can(ALICE, "create", "", "jobs", "a")  # another API group
    assert not rbac.can(ALICE, "create", "batch", "cronjobs", "a")  # another resource
    # The same account name in another namespace is another account.
    assert not rbac.can(service_account("b", "user"), "create", "batch", "jobs", "a")


def test_a_role_ref_names_a_role_of_the_bindings_own_namespace() -> None:
    rbac = RBAC([role("b", "r", JOBS), binding("a", "Role", "r", sa("a", "user"))])
    assert not rbac.can(ALICE, "get", "batch", "jobs", "a")
    assert not rbac.can(ALICE, "get", "batch", "jobs", "b")
    # A binding to a role that does not exist grants nothing.
    assert not RBAC([binding("a", "Role", "r", sa("a", "user"))]).can(
        ALICE, "get", "batch", "jobs", "a"
    )


def test_cluster_role_through_a_role_binding_is_namespaced_through_a_cluster_binding_not() -> None:
    read = cluster_role("read-pods", {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]})
    local = RBAC([read, binding("a", "ClusterRole", "read-pods", sa("a", "user"))])
    assert local.can(ALICE, "list", "", "pods", "a")
    assert not local.can(ALICE, "list", "", "pods", "b")
    assert not local.can(ALICE, "list", "", "pods", None)
    everywhere = RBAC([read, binding(None, "ClusterRole", "read-pods", sa("a", "user"))])
    assert everywhere.can(ALICE, "list", "", "pods", "a")
    assert everywhere.can(ALICE, "list", "", "pods", "b")
    assert everywhere.can(ALICE, "list", "", "pods", None)


def test_cluster_scoped_resources_need_a_cluster_role_binding() -> None:
    ns_rule = {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["patch"]}
    objs = [cluster_role("ns", ns_rule), binding("a", "ClusterRole", "ns", sa("a", "user"))]
    assert not RBAC(objs).can(ALICE, "patch", "", "namespaces", None, "a")
    objs.append(binding(None, "ClusterRole", "ns", sa("a", "user")))
    assert RBAC(objs).can(ALICE, "patch", "", "namespaces", None, "a")


@pytest.mark.parametrize(
    ("rule_resources", "resource", "allowed"),
    [
        (["pods"], "pods", True),
        (["pods"], "pods/log", False),  # a subresource is not its parent
        (["pods/log"], "pods", False),
        (["pods/log"], "pods/log", True),
        (["*"], "pods/exec", True),  # * is every resource and subresource
        (["*/log"], "pods/log", True),
        (["*/log"], "pods", False),
        (["*/log"], "pods/exec", False),
    ],
)
def test_resources_and_subresources(
    rule_resources: list[str], resource: str, allowed: bool
) -> None:
    rule = {"apiGroups": [""], "resources": rule_resources, "verbs": ["get"]}
    assert rule_allows(rule, "get", "", resource, "p") is allowed


def test_wildcard_verbs_and_groups() -> None:
    rule = {"apiGroups": ["*"], "resources": ["secrets"], "verbs": ["*"]}
    assert rule_allows(rule, "delete", "", "secrets", None)
    assert rule_allows(rule, "get", "anything.example", "secrets", "s")
    assert not rule_allows(rule, "get", "", "configmaps", "s")


def test_resource_names_allow_only_named_requests() -> None:
    rule = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"], "resourceNames": ["s1"]}
    assert rule_allows(rule, "get", "", "secrets", "s1")
    assert not rule_allows(rule, "get", "", "secrets", "s2")
    # create, list and watch carry no name: a named rule never allows them.
    assert not rule_allows(rule, "create", "", "secrets", None)
    assert not rule_allows(rule, "list", "", "secrets", None)


def test_groups_and_users_of_service_accounts() -> None:
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    objs: list[dict[str, Any]] = [cluster_role("cm", rule)]
    ns_group = RBAC(
        [
            *objs,
            binding(
                "x", "ClusterRole", "cm", {"kind": "Group", "name": "system:serviceaccounts:a"}
            ),
        ]
    )
    assert ns_group.can(ALICE, "get", "", "configmaps", "x")
    assert not ns_group.can(service_account("b", "user"), "get", "", "configmaps", "x")
    everyone = RBAC(
        [
            *objs,
            binding("x", "ClusterRole", "cm", {"kind": "Group", "name": "system:authenticated"}),
        ]
    )
    assert everyone.can(service_account("b", "other"), "get", "", "configmaps", "x")
    as_user = RBAC(
        [
            *objs,
            binding(
                "x", "ClusterRole", "cm", {"kind": "User", "name": "system:serviceaccount:a:user"}
            ),
        ]
    )
    assert as_user.can(ALICE, "get", "", "configmaps", "x")
    assert as_user.grants_anything(ALICE)
    assert not as_user.grants_anything(service_account("a", "worker"))
    # A User called like the account's short name is someone else.
    assert not RBAC(
        [*objs, binding("x", "ClusterRole", "cm", {"kind": "User", "name": "user"})]
    ).can(ALICE, "get", "", "configmaps", "x")


def test_rights_are_the_union_of_every_binding() -> None:
    objs = [
        role("a", "jobs", JOBS),
        role("a", "logs", {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}),
        binding("a", "Role", "jobs", sa("a", "user")),
        {
            **binding("a", "Role", "logs", sa("a", "user")),
            "metadata": {"name": "b2", "namespace": "a"},
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ignored"}},
    ]
    rbac = RBAC(objs)
    assert rbac.can(ALICE, "create", "batch", "jobs", "a")
    assert rbac.can(ALICE, "get", "", "pods/log", "a", "p")


def test_a_service_account_subject_without_namespace_is_the_bindings() -> None:
    objs = [
        role("a", "r", JOBS),
        binding("a", "Role", "r", {"kind": "ServiceAccount", "name": "user"}),
    ]
    assert RBAC(objs).can(ALICE, "get", "batch", "jobs", "a")
    assert not RBAC(objs).can(service_account("b", "user"), "get", "batch", "jobs", "a")


def test_what_it_cannot_judge_is_a_one_line_error() -> None:
    aggregated = {**cluster_role("agg"), "aggregationRule": {"clusterRoleSelectors": []}}
    with pytest.raises(RBACError, match="ClusterRole agg is aggregated"):
        RBAC([aggregated])
    no_ns = role("a", "r", JOBS)
    del no_ns["metadata"]["namespace"]
    with pytest.raises(RBACError, match="Role r has no namespace"):
        RBAC([no_ns])


def test_subject_kinds() -> None:
    assert Subject("User", "u").groups() == set()
    assert Subject("Group", "g").users() == set()
