"""A small evaluator of ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1), the
stand-in for the API server's admission in the attack tests.

No API server runs here. :func:`admit` answers "would the API server's policy admission
refuse this write?" from ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding
objects, as the Kubernetes reference documents them:

- a binding applies its policy (``spec.policyName``) when ``Deny`` is among its
  ``validationActions`` (Warn and Audit refuse nothing);
- a request is checked when it matches the policy's ``matchConstraints`` and the
  binding's ``matchResources``: ``resourceRules`` (apiGroups, apiVersions, operations,
  resources: ``*`` every resource, ``*/*`` every subresource, ``pods/log`` one;
  ``scope``), minus ``excludeResourceRules``; ``namespaceSelector``, matched against the
  labels of the request's namespace, of the object itself for a Namespace, and always
  matching another cluster-scoped object; ``objectSelector`` against the object's (or
  old object's) labels;
- every ``matchCondition`` must be true for the policy to apply (false: skipped);
- each ``validation`` expression must be true; a false one refuses the request with its
  ``message``; an expression that errs refuses under ``failurePolicy: Fail`` (the
  default) and is ignored under ``Ignore``;
- the expressions see ``object``, ``oldObject`` (null when absent), ``request``
  (``operation``, ``namespace``, ``name``, ``userInfo``, ``resource``, ``subResource``)
  and ``namespaceObject`` (null for cluster-scoped objects); ``variables`` are evaluated
  in order. CEL is evaluated by ``cel.py`` (a subset; it refuses what it cannot judge).

``paramKind``/``paramRef`` and ``auditAnnotations`` are not evaluated: a policy with
params is refused with an error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tests.hub.kubernetes import cel
from tests.hub.kubernetes.netpol import selects
from tests.hub.kubernetes.rbac import Subject

POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


class AdmissionError(ValueError):
    """A policy the evaluator cannot judge."""


@dataclass(frozen=True)
class Request:
    """One write as the API server admits it.

    ``resource`` is the plural (``services``), ``subresource`` e.g. ``status``;
    ``namespace`` is '' for a cluster-scoped object other than a Namespace (for a
    Namespace it is the namespace's name, as the API server sets it).
    """

    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    group: str
    resource: str
    namespace: str
    user: Subject
    object: Mapping[str, Any] | None = None
    old_object: Mapping[str, Any] | None = None
    version: str = "v1"
    subresource: str = ""
    name: str = ""
    namespaced: bool = True

    @property
    def target(self) -> Mapping[str, Any]:
        return self.object if self.object is not None else (self.old_object or {})


def create(
    obj: Mapping[str, Any], user: Subject, resource: str, namespaced: bool = True
) -> Request:
    """The CREATE of ``obj`` (its apiVersion gives the group and version)."""
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace", "") if namespaced else ""
    if obj.get("kind") == "Namespace":
        namespace = meta["name"]
    return Request(
        "CREATE",
        group,
        resource,
        namespace,
        user,
        object=obj,
        version=version,
        name=str(meta.get("name", "")),
        namespaced=namespaced,
    )


def _rule_matches(rule: Mapping[str, Any], req: Request) -> bool:
    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return "*" in values or value in values

    if not (
        has("operations", req.operation)
        and has("apiGroups", req.group)
        and has("apiVersions", req.version)
    ):
        return False
    wanted = f"{req.resource}/{req.subresource}" if req.subresource else req.resource
    resources = rule.get("resources") or []
    if not (
        wanted in resources
        or (not req.subresource and "*" in resources)
        or (req.subresource and ("*/*" in resources or f"*/{req.subresource}" in resources))
        or (req.subresource and f"{req.resource}/*" in resources)
    ):
        return False
    scope = rule.get("scope", "*")
    is_namespaced = req.namespaced and req.resource != "namespaces"
    return scope == "*" or scope == ("Namespaced" if is_namespaced else "Cluster")


def _namespace_labels(namespaces: Mapping[str, Mapping[str, str]], name: str) -> dict[str, str]:
    return {**(namespaces.get(name) or {}), "kubernetes.io/metadata.name": name}


def _resources_match(
    match: Mapping[str, Any] | None,
    req: Request,
    namespaces: Mapping[str, Mapping[str, str]],
    rules_required: bool,
) -> bool:
    match = match or {}
    rules = match.get("resourceRules")
    if (rules_required or rules) and not any(_rule_matches(r, req) for r in rules or []):
        return False
    if any(_rule_matches(r, req) for r in match.get("excludeResourceRules") or []):
        return False
    ns_selector = match.get("namespaceSelector")
    if ns_selector:
        if req.resource == "namespaces" and req.group == "":
            labels = dict((req.target.get("metadata") or {}).get("labels") or {})
            if not selects(ns_selector, {**labels, "kubernetes.io/metadata.name": req.namespace}):
                return False
        elif req.namespaced and not selects(
            ns_selector, _namespace_labels(namespaces, req.namespace)
        ):
            return False
    obj_selector = match.get("objectSelector")
    if obj_selector:
        labelled = [o for o in (req.object, req.old_object) if o is not None]
        if not any(
            selects(obj_selector, (o.get("metadata") or {}).get("labels") or {}) for o in labelled
        ):
            return False
    return True


def _activation(req: Request, namespaces: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    ns_object = None
    if req.namespaced and req.resource != "namespaces" and req.namespace:
        ns_object = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": req.namespace,
                "labels": _namespace_labels(namespaces, req.namespace),
            },
        }
    user = req.user
    return {
        "object": req.object,
        "oldObject": req.old_object,
        "namespaceObject": ns_object,
        "request": {
            "operation": req.operation,
            "namespace": req.namespace,
            "name": req.name,
            "userInfo": {
                "username": next(iter(user.users()), user.name),
                "groups": sorted(user.groups()),
            },
            "resource": {"group": req.group, "version": req.version, "resource": req.resource},
            "subResource": req.subresource,
        },
    }


def _policy_denials(
    policy: Mapping[str, Any], req: Request, namespaces: Mapping[str, Mapping[str, str]]
) -> list[str]:
    spec = policy.get("spec") or {}
    name = (policy.get("metadata") or {}).get("name")
    if spec.get("paramKind"):
        raise AdmissionError(f"ValidatingAdmissionPolicy {name} has params: not evaluated")
    fail = spec.get("failurePolicy", "Fail") == "Fail"
    env = _activation(req, namespaces)
    variables: dict[str, Any] = {}
    env["variables"] = variables
    try:
        for var in spec.get("variables") or []:
            variables[var["name"]] = cel.run(var["expression"], env)
    except cel.CELError as e:  # (CEL evaluates variables lazily; same outcome here)
        return [f"{name}: a variable failed: {e}"] if fail else []
    for cond in spec.get("matchConditions") or []:
        try:
            if cel.run(cond["expression"], env) is not True:
                return []
        except cel.CELError as e:
            return [f"{name}: matchCondition {cond['name']} failed: {e}"] if fail else []
    out = []
    for v in spec.get("validations") or []:
        try:
            ok = cel.run(v["expression"], env)
        except cel.CELError as e:
            if fail:
                out.append(f"{name}: expression failed: {e}")
            continue
        if ok is not True:
            out.append(f"{name}: {v.get('message') or v['expression']}")
    return out


def admit(
    objects: Iterable[Mapping[str, Any]],
    namespaces: Mapping[str, Mapping[str, str]],
    req: Request,
) -> list[str]:
    """The messages of every policy that refuses ``req`` ([] : admitted).

    Args:
        objects: any Kubernetes objects; the policies and bindings among them are used.
        namespaces: each namespace's labels (the metadata.name label is added).
    """
    objects = list(objects)
    policies = {
        o["metadata"]["name"]: o for o in objects if o.get("kind") == "ValidatingAdmissionPolicy"
    }
    denials: list[str] = []
    for binding in objects:
        if binding.get("kind") != "ValidatingAdmissionPolicyBinding":
            continue
        spec = binding.get("spec") or {}
        if "Deny" not in (spec.get("validationActions") or []):
            continue
        policy = policies.get(str(spec.get("policyName")))
        if policy is None:
            continue
        if spec.get("paramRef"):
            raise AdmissionError(f"binding {binding['metadata']['name']} has params")
        constraints = (policy.get("spec") or {}).get("matchConstraints")
        if not _resources_match(constraints, req, namespaces, rules_required=True):
            continue
        if not _resources_match(spec.get("matchResources"), req, namespaces, False):
            continue
        denials += _policy_denials(policy, req, namespaces)
    return denials
