"""The admission stand-ins themselves: the CEL subset (``cel.py``) and the
ValidatingAdmissionPolicy evaluator (``admission.py``), on hand-written expressions and
policies.

No API server is involved (none can run here); each case is a rule of the CEL language
definition or of the ValidatingAdmissionPolicy reference that the chart's policies, and
the attack tests judging them, rely on.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.hub.kubernetes.admission import AdmissionError, Request, admit, create
from tests.hub.kubernetes.cel import CELError, run
from tests.hub.kubernetes.rbac import Subject, service_account

LABELS = {"a": "1", "x.io/k": "v"}
ENV = {"o": {"spec": {"type": "ClusterIP", "ips": ["1.2.3.4"]}, "labels": LABELS}, "n": 3}


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        ("o.spec.type == 'ClusterIP'", True),
        ('o.spec.type != "ClusterIP"', False),
        ("has(o.spec.ips) && size(o.spec.ips) == 1", True),
        ("!has(o.spec.missing)", True),
        ("'x.io/k' in o.labels && o.labels['x.io/k'] == 'v'", True),
        ("'1.2.3.4' in o.spec.ips", True),
        ("o.spec.type in ['NodePort', 'LoadBalancer']", False),
        ("n >= 3 && n < 4", True),
        ("o.spec.ips.size() == 1 && o.spec.type.startsWith('Cluster')", True),
        ("n == 3 ? 'three' : 'other'", "three"),
        ("true == 1", False),  # a bool is never an int
        ("'3' == 3", False),  # values of different types are unequal
        ("(false || true) && !false", True),
    ],
)
def test_cel_subset(expr: str, value: Any) -> None:
    assert run(expr, ENV) == value


def test_a_missing_field_or_key_is_an_error_not_null() -> None:
    with pytest.raises(CELError, match="no such key"):
        run("o.spec.externalIPs == []", ENV)
    with pytest.raises(CELError, match="no such key"):
        run("o.labels['absent'] == 'v'", ENV)


def test_logical_operators_absorb_errors_as_cel_does() -> None:
    assert run("true || o.nope", ENV) is True
    assert run("o.nope || true", ENV) is True
    assert run("false && o.nope", ENV) is False
    assert run("o.nope && false", ENV) is False
    for expr in ("false || o.nope", "true && o.nope", "n || false"):
        with pytest.raises(CELError):
            run(expr, ENV)


@pytest.mark.parametrize("expr", ["o.spec.ips.all(i, i != '')", "n + 1 == 4", "f(n)", "o.{"])
def test_what_the_subset_cannot_judge_is_refused(expr: str) -> None:
    with pytest.raises(CELError):
        run(expr, ENV)


def policy(*validations: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "p"},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["services", "namespaces"],
                    }
                ]
            },
            "validations": [{"expression": v, "message": f"refused: {v}"} for v in validations],
            **spec,
        },
    }


def binding(actions: tuple[str, ...] = ("Deny",), **match: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"policyName": "p", "validationActions": list(actions)}
    if match:
        spec["matchResources"] = match
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "b"},
        "spec": spec,
    }


ALICE = service_account("a", "user")
LB = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "s", "namespace": "a"},
    "spec": {"type": "LoadBalancer"},
}
CLUSTER_IP_ONLY = "object.spec.type == 'ClusterIP'"


def test_a_policy_refuses_only_through_a_deny_binding() -> None:
    req = create(LB, ALICE, "services")
    assert admit([policy(CLUSTER_IP_ONLY)], {}, req) == []  # no binding: nothing
    assert admit([policy(CLUSTER_IP_ONLY), binding()], {}, req) == [
        f"p: refused: {CLUSTER_IP_ONLY}"
    ]
    assert admit([policy(CLUSTER_IP_ONLY), binding(("Warn", "Audit"))], {}, req) == []
    # Another resource or operation is not matched.
    update = Request("UPDATE", "", "services", "a", ALICE, object=LB, old_object=LB)
    assert admit([policy(CLUSTER_IP_ONLY), binding()], {}, update) == []
    pod = Request("CREATE", "", "pods", "a", ALICE, object={"spec": {}})
    assert admit([policy(CLUSTER_IP_ONLY), binding()], {}, pod) == []


def test_namespace_selectors_match_the_namespace_or_the_namespace_itself() -> None:
    objs = [
        policy("has(object.metadata.labels)"),
        binding(namespaceSelector={"matchLabels": {"team": "x"}}),
    ]
    svc = {**LB, "metadata": {"name": "s", "namespace": "a"}}
    assert admit(objs, {"a": {"team": "x"}}, create(svc, ALICE, "services"))
    assert not admit(objs, {"a": {"team": "y"}}, create(svc, ALICE, "services"))
    # A Namespace is matched on its own labels.
    unlabelled = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}
    assert not admit(objs, {}, create(unlabelled, ALICE, "namespaces", namespaced=False))
    labelled = {**unlabelled, "metadata": {"name": "n", "labels": {"team": "x"}}}
    assert admit(objs, {}, create(labelled, ALICE, "namespaces", namespaced=False)) == []
    # The metadata.name label is always there.
    by_name = [
        policy(CLUSTER_IP_ONLY),
        binding(namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "a"}}),
    ]
    assert admit(by_name, {}, create(svc, ALICE, "services"))


def test_match_conditions_select_requests_and_errors_follow_the_failure_policy() -> None:
    only_alice = [
        {
            "name": "alice",
            "expression": "request.userInfo.username == 'system:serviceaccount:a:user'",
        }
    ]
    objs = [policy(CLUSTER_IP_ONLY, matchConditions=only_alice), binding()]
    assert admit(objs, {}, create(LB, ALICE, "services"))
    assert admit(objs, {}, create(LB, Subject("User", "admin"), "services")) == []
    # A validation that errs (a missing field) refuses under Fail, not under Ignore.
    erring = "object.spec.externalIPs == []"
    assert admit([policy(erring), binding()], {}, create(LB, ALICE, "services"))
    ignore = [policy(erring, failurePolicy="Ignore"), binding()]
    assert admit(ignore, {}, create(LB, ALICE, "services")) == []


def test_request_and_namespace_object_are_what_the_api_server_gives() -> None:
    objs = [
        policy(
            "request.namespace == 'a' && namespaceObject.metadata.labels['team'] == 'x'"
            " && request.operation == 'CREATE' && request.resource.resource == 'services'"
            " && 'system:serviceaccounts:a' in request.userInfo.groups"
        ),
        binding(),
    ]
    assert admit(objs, {"a": {"team": "x"}}, create(LB, ALICE, "services")) == []
    assert admit(objs, {"a": {"team": "y"}}, create(LB, ALICE, "services"))


def test_wildcard_resources_and_subresources() -> None:
    rules = [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]
    objs = [policy("false", matchConstraints={"resourceRules": rules}), binding()]
    main = Request("DELETE", "apps", "deployments", "a", ALICE, old_object={})
    status = Request("UPDATE", "", "pods", "a", ALICE, object={}, subresource="status")
    assert admit(objs, {}, main)
    assert admit(objs, {}, status) == []  # "*" is every resource, no subresource
    rules[0]["resources"] = ["*/*"]
    assert admit(objs, {}, status)


def test_params_are_not_evaluated() -> None:
    with pytest.raises(AdmissionError, match="params"):
        admit(
            [policy("true", paramKind={"kind": "ConfigMap"}), binding()],
            {},
            create(LB, ALICE, "services"),
        )
