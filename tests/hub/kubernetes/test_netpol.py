"""The NetworkPolicy evaluator (``netpol.py``) itself, on hand-written policies.

No cluster or network plugin is involved (none can run here); each case is a rule of
the NetworkPolicy API reference that the attack tests rely on.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.hub.kubernetes.netpol import Pod, ingress_allowed, selects


def policy(ns: str, pod_selector: dict[str, Any], *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "p", "namespace": ns},
        "spec": {"podSelector": pod_selector, "policyTypes": ["Ingress"], "ingress": list(rules)},
    }


def test_unselected_pods_accept_everything_selected_ones_only_what_a_rule_allows() -> None:
    deny_all = policy("a", {"matchLabels": {"role": "db"}})
    db, web = Pod("a", {"role": "db"}), Pod("a", {"role": "web"})
    assert not ingress_allowed([deny_all], {}, web, db)
    assert ingress_allowed([deny_all], {}, db, web)
    assert ingress_allowed([policy("a", {}, {})], {}, Pod("z"), db)  # a rule without from


def test_pod_selector_alone_means_the_policys_own_namespace() -> None:
    pol = policy("a", {}, {"from": [{"podSelector": {}}]})
    assert ingress_allowed([pol], {}, Pod("a"), Pod("a"))
    assert not ingress_allowed([pol], {}, Pod("b"), Pod("a"))


def test_namespace_and_pod_selectors_together_must_both_match() -> None:
    peer = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "hub"}},
        "podSelector": {"matchExpressions": [{"key": "c", "operator": "In", "values": ["hub"]}]},
    }
    pol = policy("a", {}, {"from": [peer]})
    assert ingress_allowed([pol], {}, Pod("hub", {"c": "hub"}), Pod("a"))
    assert not ingress_allowed([pol], {}, Pod("hub", {"c": "other"}), Pod("a"))
    assert not ingress_allowed([pol], {}, Pod("b", {"c": "hub"}), Pod("a"))
    by_label = policy("a", {}, {"from": [{"namespaceSelector": {"matchLabels": {"team": "x"}}}]})
    assert ingress_allowed([by_label], {"b": {"team": "x"}}, Pod("b"), Pod("a"))
    assert not ingress_allowed([by_label], {"b": {"team": "y"}}, Pod("b"), Pod("a"))


def test_policies_of_other_namespaces_and_ip_blocks_do_not_apply() -> None:
    other = policy("b", {})
    assert ingress_allowed([other], {}, Pod("z"), Pod("a"))
    ip_only = policy("a", {}, {"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]})
    assert not ingress_allowed([ip_only], {}, Pod("z"), Pod("a"))


@pytest.mark.parametrize(
    ("expr", "labels", "matched"),
    [
        ({"key": "k", "operator": "In", "values": ["v"]}, {"k": "v"}, True),
        ({"key": "k", "operator": "In", "values": ["v"]}, {}, False),
        ({"key": "k", "operator": "NotIn", "values": ["v"]}, {}, True),
        ({"key": "k", "operator": "NotIn", "values": ["v"]}, {"k": "v"}, False),
        ({"key": "k", "operator": "Exists"}, {"k": ""}, True),
        ({"key": "k", "operator": "DoesNotExist"}, {"k": ""}, False),
    ],
)
def test_selector_expressions(expr: dict[str, Any], labels: dict[str, str], matched: bool) -> None:
    assert selects({"matchExpressions": [expr]}, labels) is matched
