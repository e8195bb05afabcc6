"""The ``restricted`` Pod Security checker (``pod_security.py``) itself.

Hand-written pods only, no API server (none can run here): a pod that meets the
standard passes, and each single departure the standard forbids is caught, so the
attack tests that rely on the checker cannot pass vacuously.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.hub.kubernetes.pod_security import restricted_violations


def good_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "c",
                    "image": "i",
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                    },
                }
            ],
            "volumes": [
                {"name": "home", "persistentVolumeClaim": {"claimName": "h"}},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
            ],
        },
    }


def container(pod: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = pod["spec"]["containers"][0]
    return c


MUTATIONS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "privileged": (
        lambda p: container(p)["securityContext"].update(privileged=True),
        "is privileged",
    ),
    "hostPath": (
        lambda p: p["spec"]["volumes"].append({"name": "root", "hostPath": {"path": "/"}}),
        "is hostPath",
    ),
    "inline nfs": (
        lambda p: p["spec"]["volumes"].append(
            {"name": "n", "nfs": {"server": "s", "path": "/homes/bob"}}
        ),
        "is nfs",
    ),
    "hostNetwork": (lambda p: p["spec"].update(hostNetwork=True), "hostNetwork"),
    "hostPID": (lambda p: p["spec"].update(hostPID=True), "hostPID"),
    "hostPort": (
        lambda p: container(p).update(ports=[{"containerPort": 80, "hostPort": 80}]),
        "hostPort",
    ),
    "escalation unset": (
        lambda p: container(p)["securityContext"].pop("allowPrivilegeEscalation"),
        "allows privilege escalation",
    ),
    "root allowed": (
        lambda p: container(p)["securityContext"].update(runAsNonRoot=False),
        "may run as root",
    ),
    "no runAsNonRoot anywhere": (
        lambda p: p["spec"]["securityContext"].pop("runAsNonRoot"),
        "may run as root",
    ),
    "uid 0": (lambda p: container(p)["securityContext"].update(runAsUser=0), "runAsUser=0"),
    "caps kept": (
        lambda p: container(p)["securityContext"]["capabilities"].update(drop=[]),
        "does not drop ALL",
    ),
    "cap added": (
        lambda p: container(p)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
        "adds capabilities ['SYS_ADMIN']",
    ),
    "no seccomp": (
        lambda p: p["spec"]["securityContext"].pop("seccompProfile"),
        "no RuntimeDefault/Localhost seccomp",
    ),
    "unconfined": (
        lambda p: container(p)["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        "Unconfined",
    ),
    "bad init container": (
        lambda p: p["spec"].update(initContainers=[{"name": "init", "image": "i"}]),
        "container 'init'",
    ),
}


def test_a_pod_meeting_the_standard_passes() -> None:
    assert restricted_violations(good_pod()) == []


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_each_departure_is_caught(mutation: str) -> None:
    pod = good_pod()
    change, message = MUTATIONS[mutation]
    change(pod)
    found = restricted_violations(pod)
    assert found and any(message in v for v in found), found


def test_container_level_settings_stand_in_for_pod_level_ones() -> None:
    pod = good_pod()
    pod["spec"]["securityContext"] = {}
    container(pod)["securityContext"].update(
        runAsNonRoot=True, seccompProfile={"type": "Localhost", "localhostProfile": "x.json"}
    )
    assert restricted_violations(pod) == []


def test_jobs_and_bare_specs_are_read_through_their_pod_template() -> None:
    pod = good_pod()
    job: dict[str, Any] = {
        "kind": "Job",
        "spec": {"template": {"spec": copy.deepcopy(pod["spec"])}},
    }
    assert restricted_violations(job) == []
    job["spec"]["template"]["spec"]["volumes"].append({"name": "r", "hostPath": {"path": "/"}})
    assert restricted_violations(job) == ["volume 'r' is hostPath"]
    assert restricted_violations(pod["spec"]) == []
    with pytest.raises(ValueError, match="no pod spec in ConfigMap"):
        restricted_violations({"kind": "ConfigMap", "data": {}})
