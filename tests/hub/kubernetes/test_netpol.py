"""The NetworkPolicy evaluator (``netpol.py``) itself, on hand-written policies.

No cluster or network plugin is involved (none can run here); each case is a rule of
the NetworkPolicy API reference that the attack tests rely on.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.hub.kubernetes.netpol import (
    Pod,
    connection_allowed,
    egress_allowed,
    ingress_allowed,
    selects,
)


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


def egress(ns: str, *rules: dict[str, Any], types: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"podSelector": {}, "egress": list(rules)}
    if types is not None:
        spec["policyTypes"] = types
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "e", "namespace": ns},
        "spec": spec,
    }


def test_ip_blocks_match_addresses_outside_their_except_blocks() -> None:
    everything_but_metadata = egress(
        "a",
        {
            "to": [
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}},
                {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128"]}},
            ]
        },
        types=["Egress"],
    )
    src = Pod("a")
    for address in ("203.0.113.7", "169.254.169.253", "2001:db8::1", "fd00:ec2::253"):
        assert egress_allowed([everything_but_metadata], {}, src, address), address
    for address in ("169.254.169.254", "fd00:ec2::254"):
        assert not egress_allowed([everything_but_metadata], {}, src, address), address
    # An ipBlock is for addresses: it never matches a pod.
    assert not egress_allowed([everything_but_metadata], {}, src, Pod("b"))
    # Ingress from an address: only a rule without from, or an ipBlock, admits it.
    assert not ingress_allowed(
        [policy("a", {}, {"from": [{"podSelector": {}}]})], {}, "1.2.3.4", src
    )
    assert ingress_allowed([policy("a", {}, {})], {}, "1.2.3.4", src)


def test_egress_policy_types_default_from_the_rules() -> None:
    no_types = egress("a", {"to": [{"podSelector": {}}]})  # Ingress and Egress
    assert egress_allowed([no_types], {}, Pod("a"), Pod("a"))
    assert not egress_allowed([no_types], {}, Pod("a"), Pod("b"))
    assert not egress_allowed([no_types], {}, Pod("a"), "203.0.113.7")
    # An ingress-only policy restricts no egress.
    assert egress_allowed([policy("a", {})], {}, Pod("a"), "203.0.113.7")
    # A policy of another namespace restricts no egress of this one.
    assert egress_allowed([no_types], {}, Pod("b"), "203.0.113.7")


def test_ports_protocols_and_ranges() -> None:
    dns = egress(
        "a",
        {
            "to": [{"namespaceSelector": {}}],
            "ports": [{"port": 53, "protocol": "UDP"}, {"port": 8000, "endPort": 8010}],
        },
        types=["Egress"],
    )
    kube_dns = Pod("kube-system")
    assert egress_allowed([dns], {}, Pod("a"), kube_dns, 53, "UDP")
    assert not egress_allowed([dns], {}, Pod("a"), kube_dns, 53, "TCP")
    assert egress_allowed([dns], {}, Pod("a"), kube_dns, 8005)  # TCP is the default
    assert not egress_allowed([dns], {}, Pod("a"), kube_dns, 8011)
    assert egress_allowed([dns], {}, Pod("a"), kube_dns)  # no port asked: not evaluated
    named = egress("a", {"ports": [{"port": "dns"}]}, types=["Egress"])
    with pytest.raises(ValueError, match="named port"):
        egress_allowed([named], {}, Pod("a"), kube_dns, 53)


def test_a_connection_needs_the_senders_egress_and_the_receivers_ingress() -> None:
    only_own = policy("b", {}, {"from": [{"podSelector": {}}]})
    out = egress("a", {"to": [{"namespaceSelector": {}}]}, types=["Egress"])
    assert egress_allowed([only_own, out], {}, Pod("a"), Pod("b"))
    assert not connection_allowed([only_own, out], {}, Pod("a"), Pod("b"))
    assert connection_allowed([out], {}, Pod("a"), Pod("b"))
    assert not connection_allowed([out], {}, Pod("a"), "203.0.113.7")
