"""A stand-in Kubernetes API server for the KubeSpawner and tenancy tests.

STAND-IN, NOT KUBERNETES. No Kubernetes API server can run on this project's machines
(ENVIRONMENT.md). KubeSpawner and the hub's pre-spawn hook talk, through
kubernetes-asyncio (their real client), to kmock's ``KubernetesEmulator`` served over
HTTP on 127.0.0.1 by ``kmock.Server``: an in-memory store that creates, lists, watches,
patches and deletes objects. What a real API server would add, :class:`ApiServerStandin`
adds:

- the namespace, uid, creationTimestamp and resourceVersion of a new object,
  ``status.phase: Pending`` of a new pod, the ``kubernetes.io/metadata.name`` label of
  a new Namespace, and ``watch=True`` (as kubernetes-asyncio sends it) read as
  ``watch=true``;
- **server-side apply** (``PATCH`` with ``application/apply-patch+yaml``), which kmock
  lacks: it requires ``fieldManager``, refuses (400) a body whose name or namespace
  differs from the URL's or that has no apiVersion/kind, creates a missing object
  (201) and otherwise replaces the object's content with the applied one, keeping its
  uid and creationTimestamp (200). That is apply with one field manager, the hub; field
  ownership between several managers, defaulting and validation are not modelled.

There is no scheduler, no kubelet, no RBAC and no admission (Pod Security included):
tests play the kubelet by patching pod status through the API, and check RBAC and the
``restricted`` profile with the oracles in ``rbac.py`` and ``pod_security.py``. kmock
does not filter lists by label selector.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import kmock
from aiohttp import web
from kmock._internal import enums, parsing, references

APPLY = "application/apply-patch+yaml"
DEADLINE_S = 20.0

#: What the stand-in lists and serves from the start (the kinds KubeSpawner watches
#: and the kinds the hub's pre-spawn hook applies).
RESOURCES = [
    "v1/pods",
    "v1/persistentvolumeclaims",
    "v1/events",
    "v1/namespaces",
    "v1/serviceaccounts",
    "v1/persistentvolumes",
    "v1/resourcequotas",
    "rbac.authorization.k8s.io/v1/roles",
    "rbac.authorization.k8s.io/v1/rolebindings",
    "networking.k8s.io/v1/networkpolicies",
    "kueue.x-k8s.io/v1beta1/localqueues",
]


def _parse_path(path: str) -> parsing.ParsedPath:
    """kmock's path parser, which reads ``/api/v1/namespaces/NAME`` as a namespace with
    no resource; here it is the Namespace object NAME."""
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "v1"] and parts[2:3] == ["namespaces"] and len(parts) <= 4:
        name = parts[3] if len(parts) == 4 else None
        return parsing.ParsedPath("", "v1", "namespaces", None, name, None)
    return parsing.parse_path(path)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    return web.json_response({**body, "reason": reason, "message": message}, status=code)


class ApiServerStandin(kmock.KubernetesEmulator):
    """kmock's emulator plus what a real API server fills in and server-side apply
    (module docstring)."""

    _versions = itertools.count(1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: (URL path, HTTP status) of every server-side apply, in order.
        self.applies: list[tuple[str, int]] = []

    async def __call__(self, raw_request: web.BaseRequest) -> web.StreamResponse:
        # kmock recognises only watch=true; kubernetes-asyncio sends watch=True.
        if raw_request.query.get("watch") in ("True", "1"):
            raw_request = raw_request.clone(rel_url=raw_request.rel_url.update_query(watch="true"))
        if raw_request.method == "PATCH" and raw_request.content_type == APPLY:
            return await self._apply(raw_request)
        path = _parse_path(raw_request.path)
        if path.plural == "namespaces" and path.namespace is None:
            return await self._namespaces(raw_request, path.name)
        return await super().__call__(raw_request)

    async def _namespaces(self, raw_request: web.BaseRequest, name: str | None) -> web.Response:
        objects: Any = self._objects  # keys: (resource, namespace or None, name)
        """GET, list and POST of Namespace objects (kmock's router misreads their paths)."""
        resource = references.resource(group="", version="v1", plural="namespaces")
        async with self._lock:
            if raw_request.method == "GET" and name is None:
                items = [
                    copy.deepcopy(o.raw)
                    for (r, _, _), o in objects.items()
                    if r == resource and not o.deleted
                ]
                return web.json_response({"kind": "NamespaceList", "items": items})
            if raw_request.method == "GET":
                key = (resource, None, name)
                if key not in objects or objects[key].deleted:
                    return _status(404, "NotFound", f'namespaces "{name}" not found')
                return web.json_response(copy.deepcopy(objects[key].raw))
            if raw_request.method == "POST" and name is None:
                body = json.loads(await raw_request.read())
                new_name = (body.get("metadata") or {}).get("name")
                key = (resource, None, new_name)
                if key in objects and not objects[key].deleted:
                    return _status(409, "AlreadyExists", f'namespaces "{new_name}" already exists')
                self._fill_new(body, None, "namespaces")
                body["metadata"]["resourceVersion"] = str(next(self._versions))
                if key in objects:
                    del objects[key]
                objects[key] = body
                return web.json_response(body, status=201)
        return _status(405, "MethodNotAllowed", f"{raw_request.method} {raw_request.path}")

    def _fill_new(self, data: dict[str, Any], namespace: str | None, plural: str) -> None:
        meta = data.setdefault("metadata", {})
        if namespace:
            meta.setdefault("namespace", namespace)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        if plural == "pods":
            data.setdefault("status", {"phase": "Pending"})
        if plural == "namespaces":
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name")

    async def _handle(self, request: Any) -> web.StreamResponse:
        writes = (enums.action.CREATE, enums.action.UPDATE)
        if request.resource is not None and request.action in writes:
            data = request.data if isinstance(request.data, dict) else {}
            if request.action == enums.action.CREATE:
                self._fill_new(data, request.namespace, request.resource.plural)
            data.setdefault("metadata", {})["resourceVersion"] = str(next(self._versions))
        return await super()._handle(request)

    async def _apply(self, raw_request: web.BaseRequest) -> web.StreamResponse:
        path = _parse_path(raw_request.path)
        if path.group is None or path.plural is None or path.name is None:
            return _status(404, "NotFound", f"no route {raw_request.path}")
        if not raw_request.query.get("fieldManager"):
            return _status(400, "BadRequest", "fieldManager is required for apply requests")
        try:
            body = json.loads(await raw_request.read())
        except ValueError as e:  # the client sends JSON (a subset of YAML)
            return _status(400, "BadRequest", f"the apply body is not JSON: {e}")
        meta = body.get("metadata") or {}
        if not body.get("apiVersion") or not body.get("kind"):
            return _status(400, "BadRequest", "apiVersion and kind are required for apply")
        if meta.get("name") != path.name:
            return _status(
                400,
                "BadRequest",
                f"the name of the object ({meta.get('name')}) does not match the name on the"
                f" URL ({path.name})",
            )
        if meta.get("namespace", path.namespace) != path.namespace:
            return _status(
                400,
                "BadRequest",
                f"the namespace of the object ({meta.get('namespace')}) does not match the"
                f" namespace on the URL ({path.namespace})",
            )
        resource = references.resource(group=path.group, version=path.version, plural=path.plural)
        key: Any = (resource, path.namespace, path.name)
        new = copy.deepcopy(body)
        async with self._lock:
            # ObjectsArray has no .get()
            old = self._objects[key] if key in self._objects else None  # noqa: SIM401
            if old is None or old.deleted:
                self._fill_new(new, path.namespace, path.plural)
                code = 201
            else:
                kept = old.raw["metadata"]
                new_meta = new.setdefault("metadata", {})
                for field in ("uid", "creationTimestamp", "namespace"):
                    if field in kept:
                        new_meta[field] = kept[field]
                if path.plural == "namespaces":
                    new_meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = path.name
                code = 200
            new["metadata"]["resourceVersion"] = str(next(self._versions))
            if old is not None:
                del self._objects[key]
            self._objects[key] = new
            self.applies.append((raw_request.path, code))
        return web.json_response(new, status=code)

    def stored(self, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """A copy of the object as the stand-in stores it, or None (never made or deleted)."""
        for (resource, ns, obj_name), obj in self.objects.items():
            if resource.plural == plural and ns == namespace and obj_name == name:
                return None if obj.deleted else copy.deepcopy(obj.raw)
        return None

    def stored_in(self, namespace: str) -> list[dict[str, Any]]:
        """Copies of every live object of ``namespace`` (namespaced objects only)."""
        return [
            copy.deepcopy(obj.raw)
            for (_, ns, _), obj in self.objects.items()
            if ns == namespace and not obj.deleted
        ]


@asynccontextmanager
async def api_server() -> AsyncIterator[tuple[ApiServerStandin, str]]:
    """A running :class:`ApiServerStandin` and its URL."""
    async with ApiServerStandin() as api, kmock.Server(api) as server:
        for resource in RESOURCES:
            api.resources[resource] = {}  # type: ignore[assignment]
        yield api, str(server.url).rstrip("/")


async def kubelet_sets_status(url: str, namespace: str, pod: str, status: dict[str, Any]) -> None:
    """Play the kubelet: wait (with a deadline) for the pod, then patch its status."""
    import kubernetes_asyncio.client as k8s

    async with k8s.ApiClient(k8s.Configuration(host=url)) as client:
        core = k8s.CoreV1Api(client)
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                await core.read_namespaced_pod(pod, namespace)
                break
            except k8s.ApiException as e:
                if e.status != 404 or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.05)
        await core.patch_namespaced_pod_status(pod, namespace, {"status": status})


def running(ready: bool = True) -> dict[str, Any]:
    """A notebook pod's status once its container runs."""
    return {
        "phase": "Running",
        "podIP": "10.1.2.3",
        "containerStatuses": [
            {
                "name": "notebook",
                "ready": ready,
                "restartCount": 0,
                "image": "alchemist/notebook:0.1.0",
                "imageID": "",
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            }
        ],
    }


async def stop_reflectors() -> None:
    """KubeSpawner keeps its watchers on the class; stop them so no task outlives the test."""
    from kubespawner import KubeSpawner

    for reflector in list(KubeSpawner.reflectors.values()):
        await reflector.stop()
    KubeSpawner.reflectors.clear()
