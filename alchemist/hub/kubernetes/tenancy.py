"""One namespace per user: what the hub creates there before the user's notebook starts.

Many users share one cluster; each user's code must reach only that user's work. The
chart's hub gives every user a namespace of their own (KubeSpawner's
``enable_user_namespaces``, ``<hub namespace>-<user>``) and, before it starts the
notebook pod there, applies the objects :func:`user_objects` lists:

- the **Namespace**, labelled to enforce the ``restricted`` Pod Security standard (no
  privileged pods, no host paths, no root, no added capabilities);
- **ServiceAccount** ``alchemist-user`` (the notebook pod's) with a **RoleBinding** of
  the chart's ClusterRole ``<hub>-user`` (:data:`USER_RULES`: Jobs, Services, pods
  (read), pod logs, events, quotas) *in that namespace only*: what the ``kubernetes``
  backend needs, nothing more (no Secrets, no claims). The hub binds that one
  ClusterRole and writes no Role, so it holds no ``escalate`` right;
- **ServiceAccount** ``alchemist-worker`` (the worker pods'), with no token;
- **PersistentVolumeClaim** ``alchemist-home`` (ReadWriteMany): the user's
  ``ALCHEMIST_HOME``, mounted at the same path in their notebook and worker pods and in
  no one else's (claims are namespaced);
- one read-only **PersistentVolume** + **PersistentVolumeClaim** per team data set of
  the chart's ``datasets:`` (an NFS export), mounted read-only in notebooks and workers;
- a **ResourceQuota** (``tenancy.quota``): what all of the user's pods may request;
- **NetworkPolicy**: pods of the namespace accept connections only from the namespace
  itself (the user's notebook and job pods) and, for the notebook, from the hub and the
  proxy; nobody else's pods reach them. A second one, ``alchemist-egress``, says where
  they may connect: the namespace, DNS, the hub's API and every address but the cloud
  metadata server (the chart's ``networkPolicy.egress``, rendered into the hub config).

The hub's own Secret, service account and database live in the release namespace,
where no user can create anything. Applying is a server-side apply per object
(:func:`apply_objects`), so a second spawn, or a chart upgrade that changes a quota,
converges to the same objects. Before it applies anything, the hook reads the
namespace: one that exists without this hub's labels for this user (another release's
namespace, a team's, another user's) is refused (:func:`check_namespace_owner`) rather
than taken over.

The objects are plain dicts; only the hook talks to the API server, through
KubeSpawner's kubernetes-asyncio client. Tests: ``tests/hub_kubernetes/test_tenancy.py``
(schemas, an RBAC evaluator, the hook against a stand-in API server) and
``tests/hub_kubernetes/test_attacks.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alchemist.hub.kubernetes.profiles import HubConfigError

USER_SERVICE_ACCOUNT = "alchemist-user"
WORKER_SERVICE_ACCOUNT = "alchemist-worker"
HOME_CLAIM = "alchemist-home"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_USER = "alchemist.io/user"
#: The namespace of the hub that owns a user namespace (two hubs never share one).
LABEL_HUB = "alchemist.io/hub-namespace"

#: What a user's notebook may do in the user's own namespace (the kubernetes backend).
USER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["get", "list", "watch", "create", "delete"],
    },
    {
        "apiGroups": [""],
        "resources": ["services"],
        "verbs": ["get", "list", "watch", "create", "delete"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    # the backend compares a job with the namespace's quota before creating it
    {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["get", "list"]},
]

#: Pod Security admission labels of every user namespace.
POD_SECURITY = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
}


def _labels(username: str) -> dict[str, str]:
    return {LABEL_PART_OF: "alchemist", LABEL_USER: username}


def namespace_labels(username: str, hub_namespace: str) -> dict[str, str]:
    """The labels of a user's namespace: whose it is, which hub made it, and the
    ``restricted`` Pod Security standard. (KubeSpawner gets the same, with
    ``{username}`` for it to expand.)"""
    return {**_labels(username), LABEL_HUB: hub_namespace, **POD_SECURITY}


def _meta(name: str, namespace: str, username: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": _labels(username)}


def datasets_of(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chart's ``datasets:`` checked: each ``{name, mountPath, nfs: {server, path}}``.

    Raises:
        HubConfigError: a data set without a name, a mount path or an NFS export.
    """
    out = []
    for i, ds in enumerate(values.get("datasets") or []):
        if not isinstance(ds, Mapping):
            raise HubConfigError(f"datasets[{i}] must be a mapping")
        name, mount = ds.get("name"), ds.get("mountPath")
        nfs = ds.get("nfs") or {}
        if not name or not mount or not nfs.get("server") or not nfs.get("path"):
            raise HubConfigError(
                f"datasets[{i}] needs name, mountPath and nfs: {{server, path}}, got {dict(ds)}"
            )
        out.append(
            {
                "name": str(name),
                "mountPath": str(mount),
                "server": str(nfs["server"]),
                "path": str(nfs["path"]),
                "capacity": str(ds.get("capacity") or "1Ti"),
            }
        )
    return out


def user_cluster_role(values: Mapping[str, Any]) -> str:
    """The chart's ClusterRole holding :data:`USER_RULES` (``tenancy.userClusterRole``,
    set by the chart's helpers to ``<hub name>-user``).

    Raises:
        HubConfigError: the hub config names none.
    """
    name = (values.get("tenancy") or {}).get("userClusterRole")
    if not name:
        raise HubConfigError(
            "tenancy.userClusterRole is missing: the chart sets it (the ClusterRole of the"
            " users' rights); a hand-written hub config must name that ClusterRole"
        )
    return str(name)


def dataset_claim(dataset: Mapping[str, Any]) -> str:
    return f"dataset-{dataset['name']}"


#: The NetworkPolicy that keeps a user namespace's pods to what they need (the
#: namespace, DNS, the hub's API, every address but the cloud metadata server): the
#: rules the chart renders into the hub config's ``networkPolicy.userEgress``.
USER_EGRESS_POLICY = "alchemist-egress"


def user_objects(values: Mapping[str, Any], username: str, namespace: str) -> list[dict[str, Any]]:
    """Every object of one user's namespace, in the order they are applied.

    Args:
        values: the hub config document (``tenancy``, ``datasets``, ``hub``).
        username: the user's safe name (KubeSpawner's ``{username}``).
        namespace: the user's namespace.
    """
    tenancy = values.get("tenancy") or {}
    hub_namespace = str((values.get("hub") or {}).get("namespace") or "")
    storage = tenancy.get("storage") or {}
    quota = {str(k): str(v) for k, v in (tenancy.get("quota") or {}).items()}
    labels = _labels(username)
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": namespace_labels(username, hub_namespace)},
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(USER_SERVICE_ACCOUNT, namespace, username),
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(WORKER_SERVICE_ACCOUNT, namespace, username),
            "automountServiceAccountToken": False,
        },
        {
            # The chart's ClusterRole of USER_RULES, granted in this namespace only. The hub
            # may bind that one ClusterRole and write no Role: it cannot grant a right it
            # was not given (no `escalate`), here or anywhere else.
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(USER_SERVICE_ACCOUNT, namespace, username),
            "subjects": [
                {"kind": "ServiceAccount", "name": USER_SERVICE_ACCOUNT, "namespace": namespace}
            ],
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": user_cluster_role(values),
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": _meta(HOME_CLAIM, namespace, username),
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": str(storage.get("capacity") or "100Gi")}},
                **(
                    {"storageClassName": str(storage["storageClassName"])}
                    if storage.get("storageClassName")
                    else {}
                ),
            },
        },
    ]
    for ds in datasets_of(values):
        pv_name = f"{namespace}-{dataset_claim(ds)}"[:253]
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": pv_name, "labels": labels},
                "spec": {
                    "capacity": {"storage": ds["capacity"]},
                    "accessModes": ["ReadOnlyMany"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "nfs": {"server": ds["server"], "path": ds["path"], "readOnly": True},
                    "mountOptions": ["ro"],
                    # Bound to this user's claim only: no one else can claim it.
                    "claimRef": {"namespace": namespace, "name": dataset_claim(ds)},
                },
            }
        )
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": _meta(dataset_claim(ds), namespace, username),
                "spec": {
                    "accessModes": ["ReadOnlyMany"],
                    "storageClassName": "",
                    "volumeName": pv_name,
                    "resources": {"requests": {"storage": ds["capacity"]}},
                },
            }
        )
    if quota:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": _meta("alchemist-user", namespace, username),
                "spec": {"hard": quota},
            }
        )
    kueue = values.get("kueue") or {}
    if kueue.get("enabled"):
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": _meta(str(kueue["localQueue"]), namespace, username),
                "spec": {"clusterQueue": str(kueue["clusterQueue"])},
            }
        )
    ingress_from: list[dict[str, Any]] = [{"podSelector": {}}]  # the namespace's own pods
    if hub_namespace:
        # The hub (API, activity) and the proxy reach the notebook server.
        ingress_from.append(
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": hub_namespace}
                },
                "podSelector": {
                    "matchExpressions": [
                        {
                            "key": "app.kubernetes.io/component",
                            "operator": "In",
                            "values": ["hub", "proxy"],
                        }
                    ]
                },
            }
        )
    objects.append(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta("alchemist-user", namespace, username),
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": ingress_from}],
            },
        }
    )
    egress = (values.get("networkPolicy") or {}).get("userEgress")
    if egress is not None:
        objects.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": _meta(USER_EGRESS_POLICY, namespace, username),
                "spec": {
                    "podSelector": {},
                    "policyTypes": ["Egress"],
                    "egress": list(egress),
                },
            }
        )
    return objects


#: kind → (API path prefix, plural, namespaced), for the kinds :func:`user_objects` makes.
_PATHS = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "PersistentVolume": ("/api/v1", "persistentvolumes", False),
    "ResourceQuota": ("/api/v1", "resourcequotas", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    "LocalQueue": ("/apis/kueue.x-k8s.io/v1beta1", "localqueues", True),
}


def object_path(obj: Mapping[str, Any]) -> str:
    """The REST path of ``obj`` (for a server-side apply)."""
    prefix, plural, namespaced = _PATHS[obj["kind"]]
    meta = obj["metadata"]
    where = f"/namespaces/{meta['namespace']}" if namespaced else ""
    return f"{prefix}{where}/{plural}/{meta['name']}"


class NamespaceTakenError(HubConfigError):
    """A user's namespace exists and belongs to someone or something else."""


def check_namespace_owner(
    existing: Mapping[str, Any] | None, username: str, hub_namespace: str
) -> None:
    """Refuse to adopt a namespace this hub did not make for ``username``.

    ``<hub namespace>-<user>`` can name a namespace that already exists: another
    release's (a user called ``dev`` next to a hub in ``alchemist-dev``), a team's, or
    another hub's user's. Applying the user's Role there would hand the user rights over
    whatever lives in it, so the spawn stops instead.

    Args:
        existing: the namespace as the API server returns it, or None if there is none.

    Raises:
        NamespaceTakenError: the namespace exists without this hub's labels for this user.
    """
    if existing is None:
        return
    meta = existing.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(LABEL_USER) != username or labels.get(LABEL_HUB) != hub_namespace:
        raise NamespaceTakenError(
            f"namespace {meta.get('name')!r} already exists and is not the namespace this hub"
            f" ({hub_namespace}) made for user {username!r} (labels {LABEL_USER}="
            f"{labels.get(LABEL_USER)!r}, {LABEL_HUB}={labels.get(LABEL_HUB)!r}): refusing to"
            " take it over; rename the user or change tenancy.namespaceTemplate"
        )


#: The fieldManager of the hub's server-side applies.
FIELD_MANAGER = "alchemist-hub"


async def read_object(api_client: Any, obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """GET ``obj`` from the API server; None when it does not exist (404)."""
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        found: dict[str, Any] = await api_client.call_api(
            object_path(obj),
            "GET",
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            response_types_map={200: "object"},
            _return_http_data_only=True,
        )
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    return found


async def apply_objects(api_client: Any, objects: list[dict[str, Any]]) -> None:
    """Server-side apply each object with ``api_client`` (a ``kubernetes_asyncio``
    ``ApiClient``, KubeSpawner's): creates what is missing, updates what changed."""
    for obj in objects:
        await api_client.call_api(
            object_path(obj),
            "PATCH",
            query_params=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            header_params={
                "Content-Type": "application/apply-patch+yaml",
                "Accept": "application/json",
            },
            body=obj,
            auth_settings=["BearerToken"],
            response_types_map={200: "object", 201: "object"},
            _return_http_data_only=True,
        )


def make_pre_spawn_hook(values: Mapping[str, Any]) -> Any:
    """A KubeSpawner ``pre_spawn_hook`` that applies the user's namespace objects."""

    hub_namespace = str((values.get("hub") or {}).get("namespace") or "")

    async def pre_spawn_hook(spawner: Any) -> None:
        username = spawner._expand_user_properties("{username}")
        objects = user_objects(values, username, spawner.namespace)
        api_client = spawner.api.api_client
        check_namespace_owner(await read_object(api_client, objects[0]), username, hub_namespace)
        spawner.log.info(
            "alchemist: applying %d objects of namespace %s", len(objects), spawner.namespace
        )
        await apply_objects(api_client, objects)

    return pre_spawn_hook
