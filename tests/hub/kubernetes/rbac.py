"""A small evaluator of Kubernetes RBAC, the oracle of the tenancy and attack tests.

No API server (so no RBAC authorizer) can run here; this answers "may this subject do
this?" from Role, ClusterRole, RoleBinding and ClusterRoleBinding objects, following the
authorizer's rules (k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac, as documented in
the RBAC reference):

- a request is allowed when any rule of any role bound to the subject matches it
  (a union; RBAC has no deny);
- a RoleBinding grants its Role's, or a ClusterRole's, rules in the binding's namespace
  only; a ClusterRoleBinding grants a ClusterRole's rules in every namespace and on
  cluster-scoped resources (``namespace=None``); a RoleBinding never grants
  cluster-scoped resources, nor a list across all namespaces;
- a rule matches when its apiGroups, resources and verbs each contain the request's
  or ``*``; ``resources`` entries are ``plural`` or ``plural/subresource``: ``pods``
  does not match ``pods/log``, ``*`` matches everything and ``*/log`` any ``log``
  subresource; non-empty ``resourceNames`` match only requests that name one of them
  (so never a create, list or watch, whose request carries no name);
- subjects: a ServiceAccount by namespace and name; a User by name (a service
  account is also the user ``system:serviceaccount:<ns>:<name>``); a Group by name,
  service accounts being in ``system:serviceaccounts``,
  ``system:serviceaccounts:<ns>`` and ``system:authenticated``.

Only the objects given are known: a real cluster adds its bootstrap roles (discovery,
self-reviews), which grant no rights over anyone's objects. Aggregated ClusterRoles
(``aggregationRule``) and ``nonResourceURLs`` are not evaluated: the first is refused
with an error, the second ignored (no request here is a non-resource URL).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class Subject:
    """Who asks: a ServiceAccount (``namespace`` set), a User or a Group member."""

    kind: str
    name: str
    namespace: str = ""

    def users(self) -> set[str]:
        if self.kind == "ServiceAccount":
            return {f"system:serviceaccount:{self.namespace}:{self.name}"}
        return {self.name} if self.kind == "User" else set()

    def groups(self) -> set[str]:
        if self.kind == "ServiceAccount":
            return {
                "system:serviceaccounts",
                f"system:serviceaccounts:{self.namespace}",
                "system:authenticated",
            }
        return {self.name} if self.kind == "Group" else set()


def service_account(namespace: str, name: str) -> Subject:
    return Subject("ServiceAccount", name, namespace)


class RBACError(ValueError):
    """An RBAC object the evaluator cannot judge (one line, naming it)."""


def _names(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
    return f"{obj.get('kind')} {where}{meta.get('name')}"


def _matches(values: Iterable[str], wanted: str) -> bool:
    values = list(values)
    return "*" in values or wanted in values


def _resource_matches(rule_resources: Iterable[str], resource: str) -> bool:
    sub = resource.split("/", 1)[1] if "/" in resource else ""
    for entry in rule_resources:
        if entry in ("*", resource):
            return True
        if sub and entry == f"*/{sub}":
            return True
    return False


def rule_allows(
    rule: Mapping[str, Any], verb: str, group: str, resource: str, name: str | None
) -> bool:
    """Whether one PolicyRule matches the request (the module docstring's rules)."""
    if "nonResourceURLs" in rule and not rule.get("resources"):
        return False
    if not _matches(rule.get("verbs") or [], verb):
        return False
    if not _matches(rule.get("apiGroups") or [], group):
        return False
    if not _resource_matches(rule.get("resources") or [], resource):
        return False
    names = rule.get("resourceNames") or []
    return not names or (name is not None and name in names)


class RBAC:
    """The RBAC objects of a cluster, asked :meth:`can`.

    Args:
        objects: any Kubernetes objects; the Roles, ClusterRoles, RoleBindings and
            ClusterRoleBindings among them are used, the rest ignored.

    Raises:
        RBACError: an aggregated ClusterRole, or a role or binding without a namespace
            where one is needed.
    """

    def __init__(self, objects: Iterable[Mapping[str, Any]]) -> None:
        self.roles: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        self.cluster_roles: dict[str, list[Mapping[str, Any]]] = {}
        self.bindings: list[Mapping[str, Any]] = []
        self.cluster_bindings: list[Mapping[str, Any]] = []
        for obj in objects:
            if not str(obj.get("apiVersion", "")).startswith(f"{RBAC_GROUP}/"):
                continue
            kind, meta = obj.get("kind"), obj.get("metadata") or {}
            if kind == "ClusterRole":
                if obj.get("aggregationRule"):
                    raise RBACError(f"{_names(obj)} is aggregated: the evaluator cannot judge it")
                self.cluster_roles[meta["name"]] = list(obj.get("rules") or [])
            elif kind == "ClusterRoleBinding":
                self.cluster_bindings.append(obj)
            elif kind in ("Role", "RoleBinding"):
                if not meta.get("namespace"):
                    raise RBACError(f"{_names(obj)} has no namespace")
                if kind == "Role":
                    self.roles[(meta["namespace"], meta["name"])] = list(obj.get("rules") or [])
                else:
                    self.bindings.append(obj)

    @staticmethod
    def _binds(binding: Mapping[str, Any], subject: Subject) -> bool:
        for s in binding.get("subjects") or []:
            kind, name = s.get("kind"), s.get("name")
            if kind == "ServiceAccount":
                # A RoleBinding's ServiceAccount subject without a namespace means the
                # binding's own namespace.
                ns = s.get("namespace") or (binding.get("metadata") or {}).get("namespace")
                if subject.kind == "ServiceAccount" and (ns, name) == (
                    subject.namespace,
                    subject.name,
                ):
                    return True
            elif (kind == "User" and name in subject.users()) or (
                kind == "Group" and name in subject.groups()
            ):
                return True
        return False

    def _rules_of(self, binding: Mapping[str, Any], namespace: str | None) -> list[Any]:
        ref = binding.get("roleRef") or {}
        if ref.get("kind") == "ClusterRole":
            return self.cluster_roles.get(str(ref.get("name")), [])
        if ref.get("kind") == "Role" and namespace is not None:
            return self.roles.get((namespace, str(ref.get("name"))), [])
        return []

    def can(
        self,
        subject: Subject,
        verb: str,
        group: str,
        resource: str,
        namespace: str | None,
        name: str | None = None,
    ) -> bool:
        """Whether ``subject`` may ``verb`` the ``resource`` (``plural`` or
        ``plural/subresource``) of API ``group`` ('' = core) in ``namespace`` (None: a
        cluster-scoped resource, or a request across all namespaces), optionally the
        object called ``name``."""
        for binding in self.cluster_bindings:
            if self._binds(binding, subject):
                ref = binding.get("roleRef") or {}
                rules = (
                    self.cluster_roles.get(str(ref.get("name")), [])
                    if ref.get("kind") == "ClusterRole"
                    else []
                )
                if any(rule_allows(r, verb, group, resource, name) for r in rules):
                    return True
        if namespace is None:
            return False
        for binding in self.bindings:
            if (binding.get("metadata") or {}).get("namespace") != namespace:
                continue
            if self._binds(binding, subject) and any(
                rule_allows(r, verb, group, resource, name)
                for r in self._rules_of(binding, namespace)
            ):
                return True
        return False

    def grants_anything(self, subject: Subject) -> bool:
        """Whether any binding names ``subject`` (directly or through a group)."""
        return any(self._binds(b, subject) for b in [*self.bindings, *self.cluster_bindings])
