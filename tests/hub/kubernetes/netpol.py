"""A small evaluator of Kubernetes NetworkPolicy, an oracle of the attack tests.

No cluster (so no network plugin enforcing policies) runs here. :func:`ingress_allowed`
answers "may this pod (or outside address) open a connection to this pod?",
:func:`egress_allowed` "may this pod open a connection to that pod or address?", and
:func:`connection_allowed` both at once, from NetworkPolicy objects, as the
networking.k8s.io/v1 API documents them:

- a pod selected by no policy whose ``policyTypes`` include Ingress (Egress) accepts
  (sends) everything; a selected pod accepts (sends) only what some ingress (egress) rule
  of some selecting policy allows (a union, no deny). Without ``policyTypes`` a policy is
  of type Ingress, plus Egress when it has egress rules;
- a rule without ``from`` (``to``) allows every peer; a peer with only ``podSelector``
  matches pods of the policy's own namespace, with only ``namespaceSelector`` every pod
  of the matching namespaces, with both the matching pods of the matching namespaces;
- an ``ipBlock`` peer matches addresses in its ``cidr`` and in none of its ``except``
  blocks (IPv4 and IPv6). Addresses here are outside the cluster (the internet, the
  cloud metadata server): an ipBlock never matches a pod, since whether a plugin applies
  it to pod addresses is left to the implementation;
- a rule without ``ports`` allows every port; a ``ports`` entry matches its protocol
  (default TCP) and its ``port`` (every port when absent), up to ``endPort``. Named
  ports are not evaluated (an error); a query without a port ignores ports;
- selectors: ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists,
  DoesNotExist); an empty selector matches everything. Every namespace carries
  ``kubernetes.io/metadata.name`` (the API server sets it).

Traffic from or to the pod's own node (kubelet probes) is always allowed by the API's
rules and is not modelled.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)


#: A pod, or an address outside the cluster (``"169.254.169.254"``, ``"fd00:ec2::254"``).
Peer = Pod | str


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a label selector matches ``labels`` (None: the field is absent)."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"unknown selector operator {op!r}")
    return True


def _namespace_labels(namespaces: Mapping[str, Mapping[str, str]], name: str) -> dict[str, str]:
    return {**(namespaces.get(name) or {}), "kubernetes.io/metadata.name": name}


def _in_block(block: Mapping[str, Any], address: str) -> bool:
    ip = ipaddress.ip_address(address)
    cidr = ipaddress.ip_network(block["cidr"], strict=False)
    if ip.version != cidr.version or ip not in cidr:
        return False
    return not any(
        ip in ipaddress.ip_network(e, strict=False)
        for e in block.get("except") or []
        if ipaddress.ip_network(e, strict=False).version == ip.version
    )


def _peer_matches(
    peer: Mapping[str, Any],
    policy_ns: str,
    other: Peer,
    namespaces: Mapping[str, Mapping[str, str]],
) -> bool:
    if isinstance(other, str):
        return "ipBlock" in peer and _in_block(peer["ipBlock"], other)
    if "podSelector" not in peer and "namespaceSelector" not in peer:
        return False  # an ipBlock: addresses, not pods
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], _namespace_labels(namespaces, other.namespace)):
            return False
    elif other.namespace != policy_ns:
        return False
    return selects(peer.get("podSelector"), other.labels)


def _ports_match(rule: Mapping[str, Any], port: int | None, protocol: str) -> bool:
    entries = rule.get("ports")
    if not entries or port is None:
        return True
    for entry in entries:
        if entry.get("protocol", "TCP") != protocol:
            continue
        if "port" not in entry:
            return True
        first = entry["port"]
        if not isinstance(first, int):
            raise ValueError(f"named port {first!r}: not evaluated")
        if first <= port <= int(entry.get("endPort", first)):
            return True
    return False


def policy_types(spec: Mapping[str, Any]) -> list[str]:
    """``policyTypes``, or its default: Ingress, plus Egress when there are egress rules."""
    if spec.get("policyTypes"):
        return list(spec["policyTypes"])
    return ["Ingress", *(["Egress"] if spec.get("egress") else [])]


def _allowed(
    policies: Iterable[Mapping[str, Any]],
    namespaces: Mapping[str, Mapping[str, str]],
    selected: Pod,
    other: Peer,
    direction: str,
    port: int | None,
    protocol: str,
) -> bool:
    rules_key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [
        p
        for p in policies
        if p.get("kind") == "NetworkPolicy"
        and p["metadata"].get("namespace") == selected.namespace
        and direction in policy_types(p["spec"])
        and selects(p["spec"].get("podSelector"), selected.labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get(rules_key) or []:
            if not _ports_match(rule, port, protocol):
                continue
            peers = rule.get(peers_key)
            if not peers:
                return True
            if any(_peer_matches(peer, selected.namespace, other, namespaces) for peer in peers):
                return True
    return False


def ingress_allowed(
    policies: Iterable[Mapping[str, Any]],
    namespaces: Mapping[str, Mapping[str, str]],
    src: Peer,
    dst: Pod,
    port: int | None = None,
    protocol: str = "TCP",
) -> bool:
    """Whether ``dst`` accepts a connection from ``src`` under ``policies`` (other kinds
    ignored), to ``port`` (None: ports not evaluated).

    Args:
        namespaces: each namespace's labels (the metadata.name label is added).
    """
    return _allowed(policies, namespaces, dst, src, "Ingress", port, protocol)


def egress_allowed(
    policies: Iterable[Mapping[str, Any]],
    namespaces: Mapping[str, Mapping[str, str]],
    src: Pod,
    dst: Peer,
    port: int | None = None,
    protocol: str = "TCP",
) -> bool:
    """Whether ``src`` may send a connection to ``dst`` (a pod or an address), to
    ``port`` (None: ports not evaluated), under its own namespace's policies."""
    return _allowed(policies, namespaces, src, dst, "Egress", port, protocol)


def connection_allowed(
    policies: Iterable[Mapping[str, Any]],
    namespaces: Mapping[str, Mapping[str, str]],
    src: Pod,
    dst: Peer,
    port: int | None = None,
    protocol: str = "TCP",
) -> bool:
    """Whether a connection from ``src`` to ``dst`` gets through: the source's egress
    and, for a pod, the destination's ingress both allow it."""
    policies = list(policies)
    return egress_allowed(policies, namespaces, src, dst, port, protocol) and (
        isinstance(dst, str) or ingress_allowed(policies, namespaces, src, dst, port, protocol)
    )
