"""A small evaluator of Kubernetes NetworkPolicy ingress, an oracle of the attack tests.

No cluster (so no network plugin enforcing policies) runs here. :func:`ingress_allowed`
answers "may a pod with these labels in that namespace open a connection to this pod?"
from NetworkPolicy objects, as the networking.k8s.io/v1 API documents them:

- a pod selected by no policy whose ``policyTypes`` include Ingress accepts everything;
  a selected pod accepts only what some ingress rule of some selecting policy allows
  (a union, no deny);
- a rule without ``from`` allows every source; a peer with only ``podSelector``
  matches pods of the policy's own namespace, with only ``namespaceSelector`` every pod
  of the matching namespaces, with both the matching pods of the matching namespaces;
- selectors: ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists,
  DoesNotExist); an empty selector matches everything. Every namespace carries
  ``kubernetes.io/metadata.name`` (the API server sets it).

Ports and ``ipBlock`` peers are not evaluated (a peer with only ``ipBlock`` matches no
pod here; it is meant for addresses outside the cluster).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)


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


def _peer_matches(
    peer: Mapping[str, Any],
    policy_ns: str,
    src: Pod,
    namespaces: Mapping[str, Mapping[str, str]],
) -> bool:
    if "podSelector" not in peer and "namespaceSelector" not in peer:
        return False  # an ipBlock: addresses, not pods
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], _namespace_labels(namespaces, src.namespace)):
            return False
    elif src.namespace != policy_ns:
        return False
    return selects(peer.get("podSelector"), src.labels)


def ingress_allowed(
    policies: Iterable[Mapping[str, Any]],
    namespaces: Mapping[str, Mapping[str, str]],
    src: Pod,
    dst: Pod,
) -> bool:
    """Whether ``src`` may connect to ``dst`` under ``policies`` (other kinds ignored).

    Args:
        namespaces: each namespace's labels (the metadata.name label is added).
    """
    selecting = [
        p
        for p in policies
        if p.get("kind") == "NetworkPolicy"
        and p["metadata"].get("namespace") == dst.namespace
        and "Ingress" in (p["spec"].get("policyTypes") or ["Ingress"])
        and selects(p["spec"].get("podSelector"), dst.labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from")
            if not peers:
                return True
            if any(_peer_matches(peer, dst.namespace, src, namespaces) for peer in peers):
                return True
    return False
