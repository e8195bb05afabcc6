"""A job against its namespace's ResourceQuotas: pure arithmetic, no API calls.

A ResourceQuota caps what all pods of a namespace may request together
(``spec.hard``); ``status.used`` is what the pods there hold now. Kubernetes checks it
pod by pod when the Job controller creates a job's pods, so a job that asks for more
than the quota allows is created anyway and waits forever, and one that fits the quota
but not what is free waits until other pods end. :func:`check` tells the two apart
before the Job exists:

- the job alone exceeds a hard limit: :class:`~alchemist.errors.CapacityError`, one
  line naming the resource, the job's total, the quota and its limit;
- it fits the hard limits but not what is free now: a one-line note (the job is
  created and waits, pending, until pods release what it needs);
- otherwise None.

What is counted, per quota key, for the job's pods (``parallelism`` of them, each the
sum of its containers, or its largest init container if that is more, as the
scheduler and the quota admission count a pod): ``pods`` and ``count/pods``; ``cpu``,
``memory``, ``ephemeral-storage`` and every ``requests.<resource>`` (GPUs:
``requests.nvidia.com/gpu``) from the requests (a limit without a request counts as
the request, as Kubernetes defaults it); every ``limits.<resource>`` from the limits.
Object counts (``services``, ``count/jobs.batch``) and storage keys are not checked
(the API server still enforces them). A quota with a scope this module cannot decide
for the job's pods is skipped: the check refuses only what Kubernetes would refuse.

Quantities are parsed by the ``kubernetes`` client's own ``parse_quantity``
(imported on first use: the client takes seconds to import, and only a submission,
which talks to the API anyway, needs this).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from alchemist.errors import CapacityError, SpecError

#: quota keys that count pods
_POD_KEYS = ("pods", "count/pods")
#: quota keys without a prefix that mean requests (what ``requests.<name>`` means)
_BARE_REQUESTS = ("cpu", "memory", "ephemeral-storage")
#: what every pod asks for; other resources (GPUs) are named first in a refusal
_COMMON = ("cpu", "memory", "ephemeral-storage", "pods", "count/pods")
#: the fix per resource, after "use fewer workers"
_FIXES = {
    "cpu": "or less CPU per worker (--cpu)",
    "memory": "or less memory per worker (--memory)",
}


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity (``"500m"``, ``"4Gi"``, ``"1Ti"``, ``"2"``) as a Decimal.

    Raises:
        ValueError: not a quantity.
    """
    from kubernetes.utils.quantity import parse_quantity as parse

    if isinstance(value, bool) or value is None or str(value).strip() != str(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    out = parse(value)
    if not out.is_finite():
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    return Decimal(out)


def _bytes_like(resource: str) -> bool:
    base = resource.split(".", 1)[1] if resource.startswith(("requests.", "limits.")) else resource
    return base in ("memory", "ephemeral-storage", "storage") or base.startswith("hugepages-")


def format_quantity(value: Decimal, resource: str) -> str:
    """A quantity as people write it: ``16``, ``500m`` for CPU, ``1Ti``, ``1.5Gi`` for bytes.

    Bytes get the largest binary unit that says them exactly with at most two
    decimals (``1.25Ti``, but ``3000Mi`` rather than a rounded ``2.93Gi``).
    """
    if _bytes_like(resource):
        # the largest binary unit that says it exactly with at most two decimals
        for suffix, exp in (("Ei", 6), ("Pi", 5), ("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1)):
            scaled = value / Decimal(1024) ** exp
            if scaled >= 1 and scaled * 100 == (scaled * 100).to_integral_value():
                return f"{scaled.normalize():f}{suffix}"
    if value == value.to_integral_value():
        return str(int(value))
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return f"{value.normalize():f}"


def _sum(into: dict[str, Decimal], add: Mapping[str, Decimal]) -> None:
    for k, v in add.items():
        into[k] = into.get(k, Decimal(0)) + v


def _container_amounts(
    container: Mapping[str, Any],
) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    """(requests, limits) of one container; a limit without a request is its request."""
    res = container.get("resources") or {}
    limits: dict[str, Decimal] = {}
    requests: dict[str, Decimal] = {}
    for target, raw in ((limits, res.get("limits") or {}), (requests, res.get("requests") or {})):
        for name, q in raw.items():
            try:
                target[name] = parse_quantity(q)
            except ValueError:
                raise SpecError(
                    f"{name} {q!r} of container {container.get('name')!r} is not a Kubernetes"
                    " quantity (like 500m, 4, 16Gi): fix --cpu/--memory or"
                    f" c.KubernetesBackend.{name}"
                ) from None
    return {**limits, **requests}, limits


def pod_amounts(pod_spec: Mapping[str, Any]) -> tuple[dict[str, Decimal], dict[str, Decimal]]:
    """(requests, limits) of one pod, as the quota admission counts them.

    The sum over the containers, or per resource the largest init container when that
    is more (init containers run one at a time, before the others); plus the pod's
    ``overhead`` if it has one.

    Raises:
        SpecError: a container's quantity is not a Kubernetes quantity.
    """
    out: list[dict[str, Decimal]] = []
    for which in (0, 1):
        total: dict[str, Decimal] = {}
        for c in pod_spec.get("containers") or []:
            _sum(total, _container_amounts(c)[which])
        for c in pod_spec.get("initContainers") or []:
            for k, v in _container_amounts(c)[which].items():
                total[k] = max(total.get(k, Decimal(0)), v)
        for k, q in (pod_spec.get("overhead") or {}).items():
            _sum(total, {k: parse_quantity(q)})
        out.append(total)
    return out[0], out[1]


def _per_pod(
    key: str, requests: Mapping[str, Decimal], limits: Mapping[str, Decimal]
) -> Decimal | None:
    """What one pod counts against quota key ``key``, or None for a key not checked."""
    if key in _POD_KEYS:
        return Decimal(1)
    if key in _BARE_REQUESTS:
        return requests.get(key, Decimal(0))
    if key.startswith("requests.") and key != "requests.storage":
        return requests.get(key[len("requests.") :], Decimal(0))
    if key.startswith("limits."):
        return limits.get(key[len("limits.") :], Decimal(0))
    return None


def _scope_matches(scope: str, pod_spec: Mapping[str, Any], besteffort: bool) -> bool | None:
    """Whether a pod is in a quota scope; None where that cannot be told from the spec."""
    if scope == "Terminating":
        return pod_spec.get("activeDeadlineSeconds") is not None
    if scope == "NotTerminating":
        return pod_spec.get("activeDeadlineSeconds") is None
    if scope == "BestEffort":
        return besteffort
    if scope == "NotBestEffort":
        return not besteffort
    if scope == "CrossNamespacePodAffinity":
        return False  # job pods have no affinity terms at all
    return None


def applies(quota: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> bool | None:
    """Whether ``quota``'s scopes select the job's pods (None: cannot tell from the spec).

    ``spec.scopes`` and ``spec.scopeSelector`` (``In``/``NotIn``/``Exists``/
    ``DoesNotExist`` on ``PriorityClass`` and the other scope names) must all match.
    """
    spec = quota.get("spec") or {}
    requests, limits = pod_amounts(pod_spec)
    besteffort = not any(k in ("cpu", "memory") for k in (*requests, *limits))
    terms: list[tuple[str, str, list[str]]] = [(s, "Exists", []) for s in spec.get("scopes") or []]
    for expr in (spec.get("scopeSelector") or {}).get("matchExpressions") or []:
        terms.append(
            (str(expr.get("scopeName")), str(expr.get("operator")), list(expr.get("values") or []))
        )
    result: bool | None = True
    for scope, op, values in terms:
        if scope == "PriorityClass":
            pc = pod_spec.get("priorityClassName")
            if pc is None:  # the cluster's default class may apply: cannot tell
                return None
            matched = {"In": pc in values, "NotIn": pc not in values, "Exists": True}.get(op)
            if op == "DoesNotExist":
                matched = False
        else:
            inside = _scope_matches(scope, pod_spec, besteffort)
            if inside is None:
                return None
            matched = {"Exists": inside, "DoesNotExist": not inside}.get(op)
        if matched is None:  # an operator this module does not know
            return None
        if not matched:
            result = False
    return result


def _pod_spec_and_count(job: Mapping[str, Any]) -> tuple[Mapping[str, Any], int]:
    spec = job.get("spec") or {}
    count = spec.get("parallelism")
    if count is None:
        count = spec.get("completions") or 1
    return (spec.get("template") or {}).get("spec") or {}, int(count)


def _label(key: str) -> str:
    """How a quota key reads in a message: ``nvidia.com/gpu``, ``memory (limits)``."""
    if key.startswith("requests."):
        return key[len("requests.") :]
    if key.startswith("limits."):
        return f"{key[len('limits.') :]} (limits)"
    return key


def _fix(key: str) -> str:
    base = _label(key).split(" ", 1)[0]
    if key in _POD_KEYS:
        return "use fewer workers"
    if base in _FIXES:
        return f"use fewer workers {_FIXES[base]}"
    if "gpu" in base:
        return "use fewer workers or GPUs (--gpus-per-worker)"
    return f"use fewer workers or less {base} per worker"


def check(job: Mapping[str, Any], quotas: Iterable[Mapping[str, Any]]) -> str | None:
    """Compare a Job manifest's pods with the namespace's ResourceQuotas.

    Args:
        job: the ``batch/v1`` Job manifest (the dry run's).
        quotas: the namespace's ResourceQuota objects, as the API serves them.

    Returns:
        None when the job fits what is free now; else one line saying what the job
        waits for (it fits the hard limits, but pods hold too much of them now).

    Raises:
        CapacityError: the job alone exceeds a quota's hard limit (it could never run).
        SpecError: a container quantity is not a Kubernetes quantity.
    """
    pod_spec, count = _pod_spec_and_count(job)
    requests, limits = pod_amounts(pod_spec)
    waits: list[str] = []
    for quota in sorted(quotas, key=lambda q: str((q.get("metadata") or {}).get("name"))):
        if not applies(quota, pod_spec):
            continue
        name = (quota.get("metadata") or {}).get("name")
        hard = (quota.get("spec") or {}).get("hard") or {}
        used = (quota.get("status") or {}).get("used") or {}
        # GPUs and other extended resources first: the scarcest, the likeliest culprit
        for key in sorted(hard, key=lambda k: (_label(k).split(" ")[0] in _COMMON, k)):
            per_pod = _per_pod(key, requests, limits)
            if per_pod is None:
                continue
            try:
                limit = parse_quantity(hard[key])
            except ValueError:  # the API server validates quotas; never refuse over one
                continue
            total = per_pod * count
            label = _label(key)
            if total > limit:
                res = "pods" if key in _POD_KEYS else label
                asks = (
                    f"{count} pods (one per worker)"
                    if key in _POD_KEYS
                    else f"{format_quantity(total, key)} {label} in total"
                    f" ({count} workers × {format_quantity(per_pod, key)})"
                )
                raise CapacityError(
                    f"the job asks for {asks}; your namespace's quota {name!r} allows"
                    f" {hard[key]} {res}: {_fix(key)}, or ask an admin for a larger quota"
                )
            if key in used and not waits:
                try:
                    free = max(Decimal(0), limit - parse_quantity(used[key]))
                except ValueError:
                    continue
                if total > free:
                    waits.append(
                        f"your namespace's quota {name!r} has {format_quantity(free, key)} of"
                        f" {hard[key]} {label} free and the job asks for"
                        f" {format_quantity(total, key)}: it waits (pending) until other jobs"
                        " or notebooks release them"
                    )
    return waits[0] if waits else None
