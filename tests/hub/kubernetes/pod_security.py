"""A checker of the ``restricted`` Pod Security standard, the oracle of the admission
that every user namespace enforces (``pod-security.kubernetes.io/enforce: restricted``).

No API server (so no Pod Security admission) runs here. :func:`restricted_violations`
applies the standard's pod rules the tenancy and attack tests rely on, as the
Kubernetes "Pod Security Standards" page states them for the ``restricted`` level
(which includes ``baseline``), to every container, init container and ephemeral
container of a Pod, a Job or a bare pod spec:

- no ``privileged`` container; no ``hostNetwork``, ``hostPID`` or ``hostIPC``; no
  ``hostPort``;
- volumes only of the types configMap, csi, downwardAPI, emptyDir, ephemeral,
  persistentVolumeClaim, projected and secret (so no ``hostPath``, no inline ``nfs``);
- ``runAsNonRoot: true`` on the pod or on every container, and no container setting it
  false; no ``runAsUser: 0``;
- ``allowPrivilegeEscalation: false`` on every container;
- ``capabilities.drop`` containing ``ALL`` on every container, and nothing added but
  ``NET_BIND_SERVICE``;
- a seccomp profile ``RuntimeDefault`` or ``Localhost`` on the pod or on every
  container, and never ``Unconfined``.

Not checked (no Alchemist pod sets them, and the attacks here do not need them):
AppArmor, SELinux options, ``procMount``, sysctls and Windows host processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ALLOWED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SECCOMP_OK = {"RuntimeDefault", "Localhost"}


def pod_spec_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod spec of a Pod, a Job (its template), a pod template or a pod spec."""
    spec = obj.get("spec", obj) if "containers" not in obj else obj
    if "template" in spec:  # a Job (or any workload with a pod template)
        spec = spec["template"]["spec"]
    if "containers" not in spec:
        raise ValueError(f"no pod spec in {obj.get('kind', 'object')}")
    return spec


def restricted_violations(obj: Mapping[str, Any]) -> list[str]:
    """Why ``obj``'s pods fail the ``restricted`` standard (empty: they pass)."""
    spec = pod_spec_of(obj)
    out: list[str] = []
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(host):
            out.append(f"{host}=true")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            out.append(f"volume {volume.get('name')!r} is {sorted(kinds - ALLOWED_VOLUMES)[0]}")
    pod_sc = spec.get("securityContext") or {}
    pod_non_root = pod_sc.get("runAsNonRoot") is True
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    if pod_sc.get("runAsUser") == 0:
        out.append("pod runAsUser=0")
    if pod_seccomp == "Unconfined":
        out.append("pod seccompProfile Unconfined")
    containers = [
        *(spec.get("initContainers") or []),
        *spec["containers"],
        *(spec.get("ephemeralContainers") or []),
    ]
    for c in containers:
        name = c.get("name")
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"container {name!r} is privileged")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"container {name!r} uses hostPort {port['hostPort']}")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"container {name!r} allows privilege escalation")
        non_root = sc.get("runAsNonRoot")
        if non_root is False or (non_root is None and not pod_non_root):
            out.append(f"container {name!r} may run as root (runAsNonRoot not true)")
        if sc.get("runAsUser") == 0:
            out.append(f"container {name!r} runAsUser=0")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"container {name!r} does not drop ALL capabilities")
        added = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            out.append(f"container {name!r} adds capabilities {sorted(added)}")
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if seccomp == "Unconfined":
            out.append(f"container {name!r} seccompProfile Unconfined")
        elif seccomp not in SECCOMP_OK and pod_seccomp not in SECCOMP_OK:
            out.append(f"container {name!r} has no RuntimeDefault/Localhost seccomp profile")
    return out
