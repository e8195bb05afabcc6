"""A stand-in Kubernetes API server, job controller and kubelet, for tests.

STAND-IN, NOT KUBERNETES. No real API server can run on the project's machines (see
ENVIRONMENT.md), so the operations of the Kubernetes backend are tested against this:

- :class:`StandinApiServer`: a real HTTP server on 127.0.0.1 that speaks the subset of
  the Kubernetes REST API the backend uses (create/read/list/delete of Jobs, Services,
  pods and events; pod logs with ``follow``; label and field selectors; 409 on
  duplicates; 404 for unknown namespaces; cascading deletion through ownerReferences,
  as the garbage collector does), talked to by the official ``kubernetes`` client.
  Faults (403, quota, 409, 500...) can be injected per request.
- :class:`Kubelet`: the test plays the Job controller and the kubelet: it creates a
  pod per completion index from the Job's template, moves pods through their phases,
  sets pod logs, and derives the Job's status and conditions (backoffLimit and
  podFailurePolicy included) the way the Job controller does, simplified. When the
  namespace holds ResourceQuotas (stored with ``put``; listed over HTTP like the other
  kinds), it also plays the quota admission (a pod over a quota's ``spec.hard`` is not
  created: a FailedCreate event with the API server's "exceeded quota" message) and the
  quota controller (``status.used`` from the live pods).
- :class:`ProcessKubelet`: a Kubelet that really runs each pod's container command as a
  local process, with the env the pod would get (``JOB_COMPLETION_INDEX`` from its
  annotation, ``$(VAR)`` expansion) and the headless Service's pod names resolved to
  127.0.0.1; the process's output is the pod log and its exit code the pod's.

kmock's emulator (0.8, ENVIRONMENT.md) was considered first; its source shows lists
filtered by namespace and name only (no label or field selectors), no ownerReference
garbage collection, no pod log subresource and no server-filled metadata, which is
most of what the backend relies on, so this small server replaces it.

For the conformance suite: :func:`standin_backend` gives a ``KubernetesBackend`` wired to
a running server plus the :class:`ProcessKubelet` that runs its pods.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

_PATH_RE = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[a-z.]+)/v1)/namespaces/(?P<ns>[^/]+)/(?P<plural>[a-z]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[a-z]+))?)?$"
)
_KINDS = {
    "jobs": "Job",
    "services": "Service",
    "pods": "Pod",
    "events": "Event",
    "resourcequotas": "ResourceQuota",
}


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Fault:
    """An injected error: the next ``times`` requests matching method and path fail."""

    method: str
    path: re.Pattern[str]
    status: int
    reason: str
    message: str
    times: int = 1


def _matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k) != v:
                return False
        elif term not in labels:
            return False
    return True


def _field(obj: dict[str, Any], path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


class StandinApiServer:
    """The in-memory API server (see the module docstring). Use as a context manager."""

    def __init__(self, namespaces: tuple[str, ...] = ("default",)) -> None:
        self.namespaces = set(namespaces)
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.logs: dict[tuple[str, str], str] = {}
        self.requests: list[tuple[str, str]] = []
        self.faults: list[Fault] = []
        self.lock = threading.RLock()
        self._rv = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> StandinApiServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                server._handle(self, "GET")

            def do_POST(self) -> None:
                server._handle(self, "POST")

            def do_DELETE(self) -> None:
                server._handle(self, "DELETE")

            def do_PATCH(self) -> None:
                server._handle(self, "PATCH")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> StandinApiServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def api_client(self) -> Any:
        """An official ``kubernetes.client.ApiClient`` pointed at this server."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        return client.ApiClient(cfg)

    # -- test controls ------------------------------------------------------------------
    def fail(
        self, method: str, path: str, status: int, reason: str, message: str, times: int = 1
    ) -> None:
        """Make the next ``times`` ``method`` requests whose path matches regex ``path`` fail."""
        with self.lock:
            self.faults.append(Fault(method, re.compile(path), status, reason, message, times))

    def get(self, plural: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get((plural, ns, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(self, plural: str, ns: str, selector: str = "") -> list[dict[str, Any]]:
        with self.lock:
            return [
                copy.deepcopy(o)
                for (p, n, _), o in self.objects.items()
                if p == plural and n == ns and _matches(selector, o["metadata"].get("labels") or {})
            ]

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as is (the controllers' and kubelet's writes); fills metadata on create."""
        with self.lock:
            meta = obj.setdefault("metadata", {})
            key = (plural, meta["namespace"], meta["name"])
            if key not in self.objects:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", now_iso())
            self._rv += 1
            meta["resourceVersion"] = str(self._rv)
            self.objects[key] = copy.deepcopy(obj)
            return obj

    def delete(self, plural: str, ns: str, name: str) -> bool:
        """Delete an object and, like the garbage collector, everything it owns."""
        with self.lock:
            obj = self.objects.pop((plural, ns, name), None)
            if obj is None:
                return False
            uid = obj["metadata"].get("uid")
            for key, other in list(self.objects.items()):
                refs = other["metadata"].get("ownerReferences") or []
                if key in self.objects and any(r.get("uid") == uid for r in refs):
                    self.delete(*key)
            return True

    def event(self, ns: str, kind: str, name: str, reason: str, message: str) -> None:
        self.put(
            "events",
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{name}.{uuid.uuid4().hex[:10]}", "namespace": ns},
                "involvedObject": {"kind": kind, "name": name, "namespace": ns},
                "reason": reason,
                "message": message,
                "type": "Warning",
                "lastTimestamp": now_iso(),
            },
        )

    # -- HTTP ---------------------------------------------------------------------------
    def _status(self, code: int, reason: str, message: str) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure" if code >= 400 else "Success",
            "message": message,
            "reason": reason,
            "code": code,
        }

    def _send(self, h: BaseHTTPRequestHandler, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urlparse(h.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        with self.lock:
            self.requests.append((method, url.path))
            for fault in self.faults:
                if fault.times > 0 and fault.method == method and fault.path.search(url.path):
                    fault.times -= 1
                    return self._send(
                        h, fault.status, self._status(fault.status, fault.reason, fault.message)
                    )
        m = _PATH_RE.match(url.path)
        if not m or m["plural"] not in _KINDS:
            return self._send(h, 404, self._status(404, "NotFound", f"no route {url.path}"))
        ns, plural, name, sub = m["ns"], m["plural"], m["name"], m["sub"]
        group = f"{plural}.{m['group']}" if m["group"] else plural
        if ns not in self.namespaces:
            return self._send(h, 404, self._status(404, "NotFound", f'namespaces "{ns}" not found'))
        if method == "POST" and name is None:
            obj = json.loads(raw or b"{}")
            meta = obj.setdefault("metadata", {})
            meta["namespace"] = ns
            with self.lock:
                if (plural, ns, meta.get("name")) in self.objects:
                    msg = f'{group} "{meta.get("name")}" already exists'
                    return self._send(h, 409, self._status(409, "AlreadyExists", msg))
                meta.setdefault("generation", 1)
                if plural == "jobs":
                    obj.setdefault("status", {})
                obj = self.put(plural, obj)
            return self._send(h, 201, obj)
        if method == "GET" and name is None:
            items = self.list(plural, ns, query.get("labelSelector", ""))
            for term in filter(None, query.get("fieldSelector", "").split(",")):
                k, v = term.split("=", 1)
                items = [o for o in items if str(_field(o, k)) == v]
            body = {"kind": f"{_KINDS[plural]}List", "apiVersion": "v1", "metadata": {}}
            return self._send(h, 200, {**body, "items": items})
        if name is None:
            return self._send(h, 405, self._status(405, "MethodNotAllowed", method))
        obj = self.get(plural, ns, name)
        if obj is None:
            return self._send(h, 404, self._status(404, "NotFound", f'{group} "{name}" not found'))
        if method == "GET" and sub == "log":
            return self._stream_log(h, ns, name, query.get("follow") in ("true", "True"))
        if method == "GET":
            return self._send(h, 200, obj)
        if method == "DELETE":
            self.delete(plural, ns, name)
            return self._send(h, 200, self._status(200, "", f"{name} deleted"))
        return self._send(h, 405, self._status(405, "MethodNotAllowed", method))

    def _stream_log(self, h: BaseHTTPRequestHandler, ns: str, pod: str, follow: bool) -> None:
        phase = (self.get("pods", ns, pod) or {}).get("status", {}).get("phase")
        if phase == "Pending":
            msg = f'container "worker" in pod "{pod}" is waiting to start: ContainerCreating'
            return self._send(h, 400, self._status(400, "BadRequest", msg))
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        sent = 0

        def chunk(data: bytes) -> None:
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()

        try:
            while True:
                with self.lock:
                    text = self.logs.get((ns, pod), "")
                    pod_obj = self.objects.get(("pods", ns, pod))
                data = text.encode()[sent:]
                if data:
                    chunk(data)
                    sent += len(data)
                ended = pod_obj is None or pod_obj["status"].get("phase") in ("Succeeded", "Failed")
                if not follow or ended:
                    break
                time.sleep(0.05)
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


class Kubelet:
    """The test playing the Job controller and the kubelet against a :class:`StandinApiServer`.

    Simplified Job controller semantics: one pod per completion index; a failed pod
    is replaced while the Job's failures stay within ``backoffLimit``; a failed Job's
    running pods are deleted; the
    podFailurePolicy rules ``Ignore`` (on ``DisruptionTarget``) and ``FailJob`` (on exit
    codes ``In``/``NotIn``) are honoured; ``activeDeadlineSeconds`` fails the Job with
    ``DeadlineExceeded`` (checked whenever the Job is synced); all indexes succeeded →
    ``Complete``.
    """

    def __init__(self, server: StandinApiServer, namespace: str = "default") -> None:
        self.server = server
        self.namespace = namespace
        #: when set, pod creation is refused with this quota message (a FailedCreate event)
        self.quota_exceeded: str | None = None

    # -- the Job controller -------------------------------------------------------------
    def job(self, name: str) -> dict[str, Any]:
        job = self.server.get("jobs", self.namespace, name)
        assert job is not None, f"no Job {name}"
        return job

    def pods(self, name: str) -> dict[int, dict[str, Any]]:
        """The newest pod of each index of Job ``name``."""
        out: dict[int, dict[str, Any]] = {}
        pods = self.server.list("pods", self.namespace)
        pods.sort(key=lambda p: int(p["metadata"]["resourceVersion"]))
        for pod in pods:
            refs = pod["metadata"].get("ownerReferences") or []
            if any(r.get("name") == name and r.get("kind") == "Job" for r in refs):
                out[int(pod["metadata"]["annotations"][COMPLETION_INDEX])] = pod
        return out

    def sync(self, name: str) -> dict[int, dict[str, Any]]:
        """Create the missing pods of Job ``name`` (the Job controller's reconcile)."""
        # Under the server's lock, so a Job deleted meanwhile (cancel) leaves no orphans.
        with self.server.lock:
            return self._sync(name)

    def _sync(self, name: str) -> dict[int, dict[str, Any]]:
        job = self.server.get("jobs", self.namespace, name)
        if job is None:  # deleted meanwhile
            return {}
        if _terminal(job) or job["spec"].get("suspend"):
            return self.pods(name)
        pods = self.pods(name)
        for idx in range(job["spec"]["completions"]):
            pod = pods.get(idx)
            if pod is not None and pod["status"].get("phase") != "Failed":
                continue
            if pod is not None and pod["status"].get("phase") == "Failed" and _terminal(job):
                continue
            refused = self.quota_exceeded or self.quota_admission(job["spec"]["template"])
            if refused:
                self.server.event(
                    self.namespace,
                    "Job",
                    name,
                    "FailedCreate",
                    f'Error creating: pods "{name}-{idx}-x" is forbidden: {refused}',
                )
                continue
            self._create_pod(job, idx)
            self.account_quotas()
        self._update_job(name)
        return self.pods(name)

    # -- the ResourceQuota admission and controller (only when the namespace has quotas) --
    def quota_usage(self, pod_template: dict[str, Any] | None = None) -> dict[str, Any]:
        """What the namespace's live pods hold, per quota key (or one pod of a template).

        Simplified like the rest: ``pods``, ``requests.<r>`` (and bare ``cpu``/``memory``)
        from container requests, ``limits.<r>`` from limits; parsed with the
        ``kubernetes`` client's ``parse_quantity``.
        """
        from decimal import Decimal

        from kubernetes.utils.quantity import parse_quantity

        if pod_template is not None:
            pods = [pod_template]
        else:
            pods = [
                p
                for p in self.server.list("pods", self.namespace)
                if p["status"].get("phase") not in ("Succeeded", "Failed")
            ]
        out: dict[str, Decimal] = {"pods": Decimal(len(pods))}
        for pod in pods:
            for c in pod["spec"].get("containers") or []:
                res = c.get("resources") or {}
                for prefix in ("requests", "limits"):
                    for r, q in (res.get(prefix) or {}).items():
                        for key in [f"{prefix}.{r}"] + ([r] if prefix == "requests" else []):
                            out[key] = out.get(key, Decimal(0)) + parse_quantity(q)
        return out

    def quota_admission(self, pod_template: dict[str, Any]) -> str | None:
        """The API server's quota check of one new pod: None, or its refusal message."""
        from kubernetes.utils.quantity import parse_quantity

        quotas = self.server.list("resourcequotas", self.namespace)
        if not quotas:
            return None
        used = self.quota_usage()
        asks = self.quota_usage(pod_template)
        for q in quotas:
            hard = q["spec"].get("hard") or {}
            over = [
                k
                for k in hard
                if asks.get(k, 0) and used.get(k, 0) + asks[k] > parse_quantity(hard[k])
            ]
            if over:
                requested = ",".join(f"{k}={asks[k]}" for k in over)
                in_use = ",".join(f"{k}={used.get(k, 0)}" for k in over)
                limited = ",".join(f"{k}={hard[k]}" for k in over)
                return (
                    f"exceeded quota: {q['metadata']['name']}, requested: {requested},"
                    f" used: {in_use}, limited: {limited}"
                )
        return None

    def account_quotas(self) -> None:
        """The quota controller: every quota's ``status.used`` from the live pods."""
        quotas = self.server.list("resourcequotas", self.namespace)
        if not quotas:
            return
        used = self.quota_usage()
        for q in quotas:
            hard = q["spec"].get("hard") or {}
            q["status"] = {
                "hard": dict(hard),
                "used": {k: str(used.get(k, 0)) for k in hard},
            }
            self.server.put("resourcequotas", q)

    def _create_pod(self, job: dict[str, Any], idx: int) -> None:
        tmpl = copy.deepcopy(job["spec"]["template"])
        meta = tmpl.setdefault("metadata", {})
        name = job["metadata"]["name"]
        meta["name"] = f"{name}-{idx}-{uuid.uuid4().hex[:5]}"
        meta["namespace"] = self.namespace
        meta.setdefault("annotations", {})[COMPLETION_INDEX] = str(idx)
        meta.setdefault("labels", {}).update(
            {COMPLETION_INDEX: str(idx), "batch.kubernetes.io/job-name": name}
        )
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job["metadata"]["uid"]}
        ]
        tmpl["spec"]["hostname"] = f"{name}-{idx}"
        tmpl["status"] = {"phase": "Pending", "conditions": []}
        self.server.put("pods", tmpl)

    def _update_job(self, name: str) -> None:
        with self.server.lock:
            job = self.server.get("jobs", self.namespace, name)
            if job is None or _terminal(job):
                return
            all_pods = [
                p
                for p in self.server.list("pods", self.namespace)
                if any(r.get("name") == name for r in p["metadata"].get("ownerReferences") or [])
            ]
            newest = self.pods(name)
            st = job.setdefault("status", {})
            st.setdefault("startTime", now_iso())
            counted = [
                p for p in all_pods if p["status"].get("phase") == "Failed" and not _ignored(p)
            ]
            st["failed"] = len(counted)
            st["succeeded"] = sum(
                1 for p in newest.values() if p["status"].get("phase") == "Succeeded"
            )
            st["active"] = sum(
                1 for p in newest.values() if p["status"].get("phase") in ("Pending", "Running")
            )
            st["ready"] = sum(1 for p in newest.values() if p["status"].get("phase") == "Running")
            conds = st.setdefault("conditions", [])
            spec = job["spec"]
            for pod in counted:
                if _fail_job_rule(spec, pod):
                    code = _exit_code(pod)
                    conds.append(
                        _cond(
                            "Failed",
                            "PodFailurePolicy",
                            f"Container worker for pod {self.namespace}/{pod['metadata']['name']}"
                            f" failed with exit code {code} matching FailJob rule at index 1",
                        )
                    )
                    st["completionTime"] = now_iso()
                    break
            else:
                deadline = spec.get("activeDeadlineSeconds")
                started = datetime.fromisoformat(st["startTime"].replace("Z", "+00:00"))
                ran = (datetime.now(timezone.utc) - started).total_seconds()
                if deadline is not None and ran > deadline:
                    conds.append(
                        _cond(
                            "Failed",
                            "DeadlineExceeded",
                            "Job was active longer than specified deadline",
                        )
                    )
                    st["completionTime"] = now_iso()
                elif st["failed"] > spec.get("backoffLimit", 6):
                    conds.append(
                        _cond(
                            "Failed",
                            "BackoffLimitExceeded",
                            "Job has reached the specified backoff limit",
                        )
                    )
                elif st["succeeded"] >= spec["completions"]:
                    conds.append(_cond("SuccessCriteriaMet", "CompletionsReached", ""))
                    conds.append(_cond("Complete", "CompletionsReached", ""))
                    st["completionTime"] = now_iso()
            self.server.put("jobs", job)
            if _terminal(job):
                # like the Job controller: once the Job has failed (or completed), its
                # pods that still run are deleted
                for pod in newest.values():
                    if pod["status"].get("phase") in ("Pending", "Running"):
                        self.server.delete("pods", self.namespace, pod["metadata"]["name"])

    # -- the kubelet --------------------------------------------------------------------
    def _pod(self, name: str, idx: int) -> dict[str, Any]:
        pod = self.pods(name).get(idx)
        assert pod is not None, f"Job {name} has no pod {idx}: call sync() first"
        return pod

    def unschedulable(self, name: str, idx: int, message: str) -> None:
        """Pod ``idx`` stays Pending: the scheduler finds no node."""
        pod = self._pod(name, idx)
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
            }
        ]
        self.server.put("pods", pod)

    def waiting(self, name: str, idx: int, reason: str, message: str) -> None:
        """Pod ``idx`` is scheduled but its container waits (e.g. ``ImagePullBackOff``)."""
        pod = self._pod(name, idx)
        pod["spec"]["nodeName"] = "node-1"
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        pod["status"]["containerStatuses"] = [
            {"name": "worker", "state": {"waiting": {"reason": reason, "message": message}}}
        ]
        self.server.put("pods", pod)

    def run(self, name: str, idx: int, node: str = "node-1") -> None:
        pod = self._pod(name, idx)
        pod["spec"]["nodeName"] = node
        pod["status"].update(
            phase="Running",
            startTime=now_iso(),
            conditions=[{"type": "PodScheduled", "status": "True"}],
            containerStatuses=[
                {"name": "worker", "state": {"running": {"startedAt": now_iso()}}, "ready": True}
            ],
        )
        self.server.put("pods", pod)
        self._update_job(name)

    def finish(
        self, name: str, idx: int, exit_code: int = 0, message: str = "", *, disrupted: bool = False
    ) -> None:
        """Pod ``idx``'s container ends with ``exit_code`` (``message``: its termination message)."""
        pod = self._pod(name, idx)
        pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
        pod["status"]["containerStatuses"] = [
            {
                "name": "worker",
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": "Completed" if exit_code == 0 else "Error",
                        "message": message,
                        "finishedAt": now_iso(),
                    }
                },
            }
        ]
        if disrupted:
            pod["status"]["conditions"].append(
                {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
            )
        self.server.put("pods", pod)
        self._update_job(name)
        self.account_quotas()  # an ended pod no longer holds quota

    def log(self, name: str, idx: int, text: str) -> None:
        """Append ``text`` to pod ``idx``'s log."""
        pod = self._pod(name, idx)
        key = (self.namespace, pod["metadata"]["name"])
        with self.server.lock:
            self.server.logs[key] = self.server.logs.get(key, "") + text

    def run_all(self, name: str) -> None:
        for idx in self.sync(name):
            self.run(name, idx)

    def succeed_all(self, name: str) -> None:
        for idx in self.sync(name):
            self.finish(name, idx, 0)


def _cond(kind: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now_iso(),
    }


def _terminal(job: dict[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in job.get("status", {}).get("conditions") or []
    )


def _ignored(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in pod["status"].get("conditions") or []
    )


def _exit_code(pod: dict[str, Any]) -> int | None:
    for cs in pod["status"].get("containerStatuses") or []:
        term = cs.get("state", {}).get("terminated")
        if term:
            return int(term["exitCode"])
    return None


def _fail_job_rule(spec: dict[str, Any], pod: dict[str, Any]) -> bool:
    code = _exit_code(pod)
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        on = rule.get("onExitCodes")
        if rule.get("action") != "FailJob" or not on or code is None:
            continue
        inside = code in on["values"]
        if (on["operator"] == "In" and inside) or (on["operator"] == "NotIn" and not inside):
            return True
    return False


class ProcessKubelet(Kubelet):
    """A :class:`Kubelet` that runs each pod's container as a real local process.

    What the process gets, as in the pod: the container's ``command`` with ``$(VAR)``
    expanded from the container's env, that env (``JOB_COMPLETION_INDEX`` resolved from
    the pod's completion-index annotation, like the downward API), and ``workingDir``.
    What differs, and why: ``python`` is this interpreter (the image's would be the
    notebook's), and every ``<job>-<i>.<service>`` name is replaced by 127.0.0.1 (no
    cluster DNS here; all pods share this host). Its output is the pod's log.

    A background thread keeps the Job controller going (creating pods, replacing failed
    ones), reports each process's end as the pod's phase, and kills processes whose pod
    was deleted (cancel). Call :meth:`close` (or use it as a context manager).
    """

    def __init__(self, server: StandinApiServer, namespace: str = "default") -> None:
        super().__init__(server, namespace)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        #: a rendezvous port per Job: in a cluster each pod has its own IP, here all share one
        self.ports: dict[str, int] = {}
        self.log_dir: Path | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def __enter__(self) -> ProcessKubelet:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for proc in self.procs.values():
            _kill(proc)
        if self.log_dir is not None:
            import shutil

            shutil.rmtree(self.log_dir, ignore_errors=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception as e:  # keep the kubelet alive; the test sees the stalled job
                print(f"ProcessKubelet: {e!r}", file=sys.stderr)
            self._stop.wait(0.1)

    def _tick(self) -> None:
        for job in self.server.list("jobs", self.namespace):
            name = job["metadata"]["name"]
            for idx, pod in self.sync(name).items():
                pname = pod["metadata"]["name"]
                if pod["status"].get("phase") == "Pending" and pname not in self.procs:
                    self.procs[pname] = self._start(pod)
                    self.run(name, idx)
        for pname, proc in list(self.procs.items()):
            pod = self.server.get("pods", self.namespace, pname)
            if pod is None:  # deleted (cancel): stop the container like the kubelet would
                _kill(proc)
                continue
            self._pump_log(pname, proc)
            if pod["status"].get("phase") == "Running" and proc.poll() is not None:
                self._pump_log(pname, proc)
                job_name = pod["metadata"]["labels"]["batch.kubernetes.io/job-name"]
                idx = int(pod["metadata"]["annotations"][COMPLETION_INDEX])
                tail = self.server.logs.get((self.namespace, pname), "")[-2048:]
                rc = proc.returncode
                self.finish(job_name, idx, rc if rc >= 0 else 128 - rc, tail if rc else "")

    def _pump_log(self, pname: str, proc: subprocess.Popen[bytes]) -> None:
        path = Path(self._log_path(pname))
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            return
        with self.server.lock:
            self.server.logs[(self.namespace, pname)] = text

    def _log_path(self, pname: str) -> str:
        import tempfile

        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="standin-pods-"))
        return str(self.log_dir / f"{pname}.log")

    def command(
        self, pod: dict[str, Any], master_port: int
    ) -> tuple[list[str], dict[str, str], str | None]:
        """The argv, env and cwd of the pod's process (a subclass runs it elsewhere)."""
        return pod_process(pod, master_port=master_port)

    def _start(self, pod: dict[str, Any]) -> subprocess.Popen[bytes]:
        job_name = pod["metadata"]["labels"]["batch.kubernetes.io/job-name"]
        if job_name not in self.ports:
            self.ports[job_name] = free_port()
        argv, env, cwd = self.command(pod, self.ports[job_name])
        out = open(self._log_path(pod["metadata"]["name"]), "wb")  # noqa: SIM115 - child owns it
        try:
            return subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            out.close()


def pod_process(
    pod: dict[str, Any], master_port: int | None = None, *, local: bool = True
) -> tuple[list[str], dict[str, str], str | None]:
    """The argv, env and cwd a pod's worker container would run, for a local process.

    See :class:`ProcessKubelet` for what is substituted and why; ``master_port``, if
    given, replaces the rendezvous port (jobs running at once share this host's ports).
    ``local=False`` keeps the image's ``python`` and gives the pod's env alone (to run
    the command inside the image, as tests/images does).
    """
    container = pod["spec"]["containers"][0]
    meta = pod["metadata"]
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = var["value"]
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            m = re.match(r"metadata\.annotations\['(.+)'\]$", path)
            assert m, f"unsupported fieldRef {path}"
            env[var["name"]] = meta["annotations"][m.group(1)]
    subdomain = pod["spec"].get("subdomain")
    host_re = re.compile(rf"\b[a-z0-9-]+-\d+\.{re.escape(subdomain)}\b") if subdomain else None

    def expand(arg: str) -> str:
        arg = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), arg)
        return host_re.sub("127.0.0.1", arg) if host_re else arg

    argv = [expand(a) for a in container["command"] + (container.get("args") or [])]
    if master_port is not None:
        argv = [
            f"--master-port={master_port}" if a.startswith("--master-port=") else a for a in argv
        ]
    if not local:
        return argv, env, container.get("workingDir")
    if argv and argv[0] == "python":
        argv[0] = sys.executable
    full_env = dict(os.environ)
    full_env.update(env)
    return argv, full_env, container.get("workingDir")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        # a shorter grace period than the kubelet's 30 s: torchrun waiting in its exit
        # barrier swallows SIGTERM, as it would in a pod
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


@contextlib.contextmanager
def standin_backend(
    alchemist_home: Path,
    *,
    run_pods: bool = True,
    kubelet_class: type[ProcessKubelet] | None = None,
    **settings: Any,
) -> Iterator[tuple[Any, Kubelet, StandinApiServer]]:
    """A ``KubernetesBackend`` wired to a fresh :class:`StandinApiServer`.

    Args:
        alchemist_home: ALCHEMIST_HOME of the test (the "shared volume"); it is the
            mount path, so job directories under it pass the backend's check.
        run_pods: with a :class:`ProcessKubelet` that really runs the pods (for the
            conformance suite); False gives a passive :class:`Kubelet` the test drives.
        kubelet_class: another :class:`ProcessKubelet` to run them (tests/images runs
            them inside the worker image).
        **settings: trait values for the backend (``image``, ``pvc``, ... have defaults).

    Yields:
        ``(backend, kubelet, server)``; everything is stopped on exit.
    """
    from alchemist.backends.kubernetes import KubernetesBackend

    values: dict[str, Any] = {
        "namespace": "default",
        "image": "alchemist/worker:test",
        "pvc": "alchemist-home",
        "mount_path": str(alchemist_home),
        "master_port": free_port(),
        "cpu": "1",
        "memory": "2Gi",
        "shm_size": "",
    }
    values.update(settings)
    from traitlets.config import Config

    with StandinApiServer(namespaces=(values["namespace"],)) as server:
        backend = KubernetesBackend(api_client=server.api_client(), config=Config(), **values)
        kubelet: Kubelet = (
            (kubelet_class or ProcessKubelet)(server, values["namespace"])
            if run_pods
            else Kubelet(server, values["namespace"])
        )
        try:
            yield backend, kubelet, server
        finally:
            if isinstance(kubelet, ProcessKubelet):
                kubelet.close()
            backend.api_client.close()
