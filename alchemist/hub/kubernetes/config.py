"""Configure JupyterHub with KubeSpawner from the chart's values.

The chart renders one YAML document, the *hub config*, into a ConfigMap mounted in the
hub pod; the hub's ``jupyterhub_config.py`` is two lines that call
:func:`configure_from_file`. Helm resolves every name (services, claims, service
accounts, the user namespace) before it writes the document, so this module holds no
naming rules of its own. Its shape::

    hub:        {connectUrl, proxyApiUrl, bindUrl, baseUrl, dbUrl, authenticator,
                 adminUsers, allowedUsers, allowAll, openSignup, namespace}
    singleuser: {namespace, image, imagePullPolicy, imagePullSecrets, workerImage,
                 serviceAccount, workerServiceAccount, gpuResource, defaultUrl, uid,
                 fsGid, startTimeout, cmd, nodeSelector, tolerations, extraEnv,
                 home: {enabled, capacity, storageClassName, mountPath}, profiles}
    shared:     {claimName, mountPath}
    kueue:      {enabled, localQueue, clusterQueue}
    workers:    {nodeSelector, tolerations, shmSize}
    tenancy:    {mode, namespaceTemplate, storage: {capacity, storageClassName}, quota}
    datasets:   [{name, mountPath, nfs: {server, path}, capacity}]

With ``tenancy.mode: namespaces`` each user gets a namespace of their own
(:func:`configure_user_namespaces`, :mod:`alchemist.hub.kubernetes.tenancy`); with
``shared`` every user runs in ``singleuser.namespace`` (docs/kubernetes.md, Isolation).

The notebook pod gets the environment the ``kubernetes`` backend reads
(:func:`backend_environment`): ``ALCHEMIST_BACKEND=kubernetes``, ``ALCHEMIST_HOME``,
``ALCHEMIST_K8S_NAMESPACE``, ``ALCHEMIST_K8S_IMAGE``, ``ALCHEMIST_K8S_PVC``,
``ALCHEMIST_K8S_MOUNT_PATH``, ``ALCHEMIST_K8S_SERVICE_ACCOUNT``,
``ALCHEMIST_K8S_GPU_RESOURCE`` and ``ALCHEMIST_K8S_QUEUE``, plus the worker pods'
``ALCHEMIST_K8S_RUN_AS_USER``/``_GROUP`` (the notebook's uid and fsGid, so both can
write the shared job directories), ``ALCHEMIST_K8S_NODE_SELECTOR`` and
``ALCHEMIST_K8S_TOLERATIONS`` (JSON) and ``ALCHEMIST_K8S_SHM_SIZE``.

Nothing here imports torch or kubernetes: the hub image has neither.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alchemist.hub.kubernetes.profiles import (
    DEFAULT_GPU_RESOURCE,
    DEFAULT_PROFILES,
    HubConfigError,
    make_profile_list,
    profile_from_values,
)

#: Where the notebook image keeps the example notebooks (images/notebook/Dockerfile).
EXAMPLES_DIR = "/opt/alchemist/notebooks"

#: Where the chart mounts the hub config document in the hub pod.
DEFAULT_CONFIG_PATH = "/usr/local/etc/alchemist/hub-config.yaml"

SHARED_VOLUME = "alchemist-shared"
HOME_VOLUME = "home"

_AUTHENTICATORS = {
    "native": "alchemist.hub.kubernetes.auth.ClusterAuthenticator",
    "dummy": "dummy",
}


def _section(values: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    section = values.get(key) or {}
    if not isinstance(section, Mapping):
        raise HubConfigError(f"'{key}' must be a mapping, got {type(section).__name__}")
    return section


def _required(section: Mapping[str, Any], key: str, where: str) -> Any:
    value = section.get(key)
    if value in (None, ""):
        raise HubConfigError(f"{where}.{key} is required in the hub config")
    return value


def backend_environment(values: Mapping[str, Any]) -> dict[str, str]:
    """The environment that configures Alchemist's ``kubernetes`` backend in a notebook.

    Args:
        values: The hub config document (see the module docstring).

    Returns:
        Variable name to value; ``ALCHEMIST_K8S_QUEUE`` is present only when Kueue is
        enabled, the worker placement variables only when set.

    Raises:
        HubConfigError: If a required key is missing.
    """
    single = _section(values, "singleuser")
    shared = _section(values, "shared")
    kueue = _section(values, "kueue")
    workers = _section(values, "workers")
    mount_path = str(_required(shared, "mountPath", "shared"))
    env = {
        "ALCHEMIST_BACKEND": "kubernetes",
        "ALCHEMIST_HOME": mount_path,
        "ALCHEMIST_K8S_NAMESPACE": str(_required(single, "namespace", "singleuser")),
        "ALCHEMIST_K8S_IMAGE": str(_required(single, "workerImage", "singleuser")),
        "ALCHEMIST_K8S_PVC": str(_required(shared, "claimName", "shared")),
        "ALCHEMIST_K8S_MOUNT_PATH": mount_path,
        "ALCHEMIST_K8S_SERVICE_ACCOUNT": str(
            _required(single, "workerServiceAccount", "singleuser")
        ),
        "ALCHEMIST_K8S_GPU_RESOURCE": str(single.get("gpuResource") or DEFAULT_GPU_RESOURCE),
        "ALCHEMIST_K8S_RUN_AS_USER": str(int(single.get("uid", 1000))),
        "ALCHEMIST_K8S_RUN_AS_GROUP": str(int(single.get("fsGid", 100))),
    }
    if workers.get("nodeSelector"):
        env["ALCHEMIST_K8S_NODE_SELECTOR"] = json.dumps(dict(workers["nodeSelector"]))
    if workers.get("tolerations"):
        env["ALCHEMIST_K8S_TOLERATIONS"] = json.dumps(list(workers["tolerations"]))
    if workers.get("shmSize"):
        env["ALCHEMIST_K8S_SHM_SIZE"] = str(workers["shmSize"])
    if kueue.get("enabled"):
        env["ALCHEMIST_K8S_QUEUE"] = str(_required(kueue, "localQueue", "kueue"))
    return env


def make_volumes(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The volumes and mounts of a notebook pod, keyed for KubeSpawner.

    KubeSpawner takes dicts keyed by name (sorted on render), which lets a profile or
    ``extraConfig`` replace one entry without restating the others.

    Args:
        values: The hub config document.

    Returns:
        ``(volumes, volume_mounts)``: the shared ReadWriteMany claim mounted at
        ``shared.mountPath`` (where ``ALCHEMIST_HOME`` points) and, when
        ``singleuser.home.enabled``, the user's own claim (``claim-{user_server}``,
        created by KubeSpawner) mounted at ``singleuser.home.mountPath``.
    """
    single = _section(values, "singleuser")
    shared = _section(values, "shared")
    volumes: dict[str, Any] = {
        SHARED_VOLUME: {
            "name": SHARED_VOLUME,
            "persistentVolumeClaim": {"claimName": str(_required(shared, "claimName", "shared"))},
        }
    }
    mounts: dict[str, Any] = {
        SHARED_VOLUME: {
            "name": SHARED_VOLUME,
            "mountPath": str(_required(shared, "mountPath", "shared")),
        }
    }
    home = single.get("home") or {}
    if home.get("enabled"):
        volumes[HOME_VOLUME] = {
            "name": HOME_VOLUME,
            "persistentVolumeClaim": {"claimName": "{pvc_name}"},
        }
        mounts[HOME_VOLUME] = {
            "name": HOME_VOLUME,
            "mountPath": str(home.get("mountPath") or "/home/jovyan"),
        }
    return volumes, mounts


def configure_kubespawner(c: Any, values: Mapping[str, Any]) -> None:
    """Set ``c.KubeSpawner`` (and the spawner class) from the hub config.

    Args:
        c: The traitlets config object of ``jupyterhub_config.py``.
        values: The hub config document.

    Raises:
        HubConfigError: On a missing key or a bad profile, naming it.
    """
    single = _section(values, "singleuser")
    gpu_resource = str(single.get("gpuResource") or DEFAULT_GPU_RESOURCE)
    raw_profiles = single.get("profiles")
    profiles = (
        [profile_from_values(p) for p in raw_profiles]
        if raw_profiles is not None
        else list(DEFAULT_PROFILES)
    )

    c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
    ks = c.KubeSpawner
    ks.namespace = str(_required(single, "namespace", "singleuser"))
    ks.image = str(_required(single, "image", "singleuser"))
    ks.image_pull_policy = str(single.get("imagePullPolicy") or "IfNotPresent")
    if single.get("imagePullSecrets"):
        ks.image_pull_secrets = list(single["imagePullSecrets"])
    ks.service_account = str(_required(single, "serviceAccount", "singleuser"))
    # The kubernetes backend talks to the API server from the notebook pod.
    ks.automount_service_account_token = True
    ks.uid = int(single.get("uid", 1000))
    ks.fs_gid = int(single.get("fsGid", 100))
    ks.cmd = list(single.get("cmd") or ["jupyterhub-singleuser"])
    ks.default_url = str(single.get("defaultUrl") or "/lab")
    ks.start_timeout = int(single.get("startTimeout", 600))
    ks.http_timeout = 120
    # KubeSpawner expands {placeholders} in env values (str.format); JSON values
    # (tolerations, node selector) must keep their braces, so ours are escaped.
    # singleuser.extraEnv is not: its values may use {username} and the like.
    env = {
        k: v.replace("{", "{{").replace("}", "}}") for k, v in backend_environment(values).items()
    }
    extra = single.get("extraEnv") or {}
    if not isinstance(extra, Mapping):
        raise HubConfigError("singleuser.extraEnv must be a mapping of NAME: value")
    env.update({str(k): str(v) for k, v in extra.items()})
    ks.volumes, ks.volume_mounts = make_volumes(values)
    # Each user's own index, in both modes (singleuser.extraEnv may name a server).
    url = index_url(values)
    if url:
        env.setdefault("ALCHEMIST_DB_URL", url)
    if per_user_namespaces(values):
        configure_user_namespaces(ks, values, env)
    ks.environment = env
    # Hardened as the `restricted` Pod Security standard asks (user namespaces enforce it).
    ks.allow_privilege_escalation = False
    ks.container_security_context = {
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    home = single.get("home") or {}
    if home.get("enabled"):
        ks.storage_pvc_ensure = True
        ks.pvc_name_template = "claim-{user_server}"
        ks.storage_capacity = str(home.get("capacity") or "10Gi")
        ks.storage_access_modes = ["ReadWriteOnce"]
        if home.get("storageClassName"):
            ks.storage_class = str(home["storageClassName"])
    if single.get("nodeSelector"):
        ks.node_selector = dict(single["nodeSelector"])
    hub_tolerations = list(single.get("tolerations") or [])
    if hub_tolerations:
        ks.tolerations = hub_tolerations
        # A profile's list would replace the hub-wide one (KubeSpawner merges only
        # dicts, such as node_selector); keep both.
        profiles = [
            dataclasses.replace(p, tolerations=(*hub_tolerations, *p.tolerations))
            if p.tolerations
            else p
            for p in profiles
        ]
    ks.extra_labels = {"app.kubernetes.io/part-of": "alchemist"}
    # Copy the example notebooks into the user's home, never overwriting their edits.
    ks.lifecycle_hooks = {
        "postStart": {
            "exec": {
                "command": [
                    "sh",
                    "-c",
                    f"if [ -d {EXAMPLES_DIR} ]; then mkdir -p ~/examples"
                    f" && cp -rn {EXAMPLES_DIR}/. ~/examples/; fi",
                ]
            }
        }
    }
    ks.profile_list = make_profile_list(profiles, gpu_resource)


def index_url(values: Mapping[str, Any]) -> str | None:
    """The job index of each user: a SQLite file on the user's own ReadWriteOnce home
    (one writer pod, one node, a local filesystem; never a file opened from two hosts),
    or None when notebooks have no home volume. The index is rebuilt from the job
    directories whenever it is lost."""
    home = _section(values, "singleuser").get("home") or {}
    if not home.get("enabled"):
        return None
    return f"sqlite:///{home.get('mountPath') or '/home/jovyan'}/.alchemist/alchemist-index.sqlite"


def per_user_namespaces(values: Mapping[str, Any]) -> bool:
    """Whether each user gets a namespace of their own (``tenancy.mode: namespaces``)."""
    mode = str(_section(values, "tenancy").get("mode") or "shared")
    if mode not in ("namespaces", "shared"):
        raise HubConfigError(f"tenancy.mode must be 'namespaces' or 'shared', got {mode!r}")
    return mode == "namespaces"


def configure_user_namespaces(ks: Any, values: Mapping[str, Any], env: dict[str, str]) -> None:
    """One namespace per user (:mod:`alchemist.hub.kubernetes.tenancy`): KubeSpawner puts
    each notebook in ``<hub namespace>-<user>``, the pre-spawn hook applies that
    namespace's objects (its accounts, rights, claim, quota and network policy), and the
    notebook's backend creates jobs there, as ``alchemist-worker``, on the user's claim.
    The job index lives on the user's own ReadWriteOnce home (one writer, a local
    filesystem), never on the shared network claim."""
    from alchemist.hub.kubernetes import tenancy

    tenancy_values = _section(values, "tenancy")
    ks.enable_user_namespaces = True
    ks.user_namespace_template = str(
        tenancy_values.get("namespaceTemplate") or "{hubnamespace}-{username}"
    )
    # As the pre-spawn hook labels it (KubeSpawner expands {username}).
    ks.user_namespace_labels = tenancy.namespace_labels(
        "{username}", str(_section(values, "hub").get("namespace") or "")
    )
    ks.service_account = tenancy.USER_SERVICE_ACCOUNT
    ks.pre_spawn_hook = tenancy.make_pre_spawn_hook(values)
    # KubeSpawner expands {namespace} (the user's) in env values.
    env["ALCHEMIST_K8S_NAMESPACE"] = "{namespace}"
    env["ALCHEMIST_K8S_PVC"] = tenancy.HOME_CLAIM
    env["ALCHEMIST_K8S_SERVICE_ACCOUNT"] = tenancy.WORKER_SERVICE_ACCOUNT
    datasets = tenancy.datasets_of(values)
    if datasets:
        env["ALCHEMIST_K8S_DATASETS"] = (
            json.dumps(
                [{"claim": tenancy.dataset_claim(d), "mountPath": d["mountPath"]} for d in datasets]
            )
            .replace("{", "{{")
            .replace("}", "}}")
        )
    volumes, mounts = dict(ks.volumes), dict(ks.volume_mounts)
    volumes[SHARED_VOLUME] = {
        "name": SHARED_VOLUME,
        "persistentVolumeClaim": {"claimName": tenancy.HOME_CLAIM},
    }
    for d in datasets:
        name = tenancy.dataset_claim(d)
        volumes[name] = {
            "name": name,
            "persistentVolumeClaim": {"claimName": name, "readOnly": True},
        }
        mounts[name] = {"name": name, "mountPath": d["mountPath"], "readOnly": True}
    ks.volumes, ks.volume_mounts = volumes, mounts


def configure_hub(c: Any, values: Mapping[str, Any]) -> None:
    """Configure the whole hub: network, database, authenticator and KubeSpawner.

    The proxy runs in its own pod, so the hub does not start it. Secrets come from the
    environment, filled from a Kubernetes Secret by the chart: ``CONFIGPROXY_AUTH_TOKEN``
    (read by JupyterHub itself), ``ALCHEMIST_HUB_COOKIE_SECRET`` (any string; the
    cookie key is its SHA-256) and ``ALCHEMIST_HUB_DB_URL`` (wins over ``hub.dbUrl``).

    Args:
        c: The traitlets config object of ``jupyterhub_config.py``.
        values: The hub config document.

    Raises:
        HubConfigError: On a missing key or an unknown authenticator, naming it.
    """
    hub = _section(values, "hub")
    c.JupyterHub.hub_bind_url = str(hub.get("bindUrl") or "http://:8081")
    c.JupyterHub.hub_connect_url = str(_required(hub, "connectUrl", "hub"))
    c.JupyterHub.base_url = str(hub.get("baseUrl") or "/")
    c.ConfigurableHTTPProxy.should_start = False
    c.ConfigurableHTTPProxy.api_url = str(_required(hub, "proxyApiUrl", "hub"))
    c.JupyterHub.db_url = os.environ.get("ALCHEMIST_HUB_DB_URL") or str(
        hub.get("dbUrl") or "sqlite:///jupyterhub.sqlite"
    )
    cookie_secret = os.environ.get("ALCHEMIST_HUB_COOKIE_SECRET")
    if cookie_secret:
        c.JupyterHub.cookie_secret = hashlib.sha256(cookie_secret.encode()).digest()
    # A user server that outlives a hub restart stays; the hub finds it again.
    c.JupyterHub.cleanup_servers = False

    kind = str(hub.get("authenticator") or "native")
    if kind not in _AUTHENTICATORS:
        raise HubConfigError(
            f"hub.authenticator must be one of {sorted(_AUTHENTICATORS)}, got {kind!r}"
        )
    c.JupyterHub.authenticator_class = _AUTHENTICATORS[kind]
    admins = set(hub.get("adminUsers") or [])
    c.Authenticator.admin_users = admins
    allowed = set(hub.get("allowedUsers") or [])
    if allowed:
        c.Authenticator.allowed_users = allowed
    c.Authenticator.allow_all = bool(hub.get("allowAll", False))
    if kind == "native":
        c.NativeAuthenticator.open_signup = bool(hub.get("openSignup", False))
        c.NativeAuthenticator.minimum_password_length = 10
        c.NativeAuthenticator.check_common_password = True
        # As the embedded hub: 5 failed logins lock a name out for 60 s.
        c.NativeAuthenticator.allowed_failed_logins = 5
        c.NativeAuthenticator.seconds_before_next_try = 60
        # Nobody can sign up under an admin's name first (alchemist.hub.kubernetes.auth).
        c.ClusterAuthenticator.create_admins = sorted(admins)
        # NativeAuthenticator lets admins authorize sign-ups; without allow_all the
        # authorized users must still pass the allow list, so let them in.
        if not allowed:
            c.Authenticator.allow_all = True

    configure_kubespawner(c, values)


def load_config_file(path: str | Path = DEFAULT_CONFIG_PATH) -> dict[str, Any]:
    """Read the hub config document the chart mounted.

    Raises:
        HubConfigError: If the file is missing or is not a YAML mapping.
    """
    import yaml  # PyYAML ships with JupyterHub's dependencies in the hub image

    file = Path(path)
    try:
        loaded = yaml.safe_load(file.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise HubConfigError(
            f"hub config {file} not found; is the chart's ConfigMap mounted?"
        ) from e
    if not isinstance(loaded, dict):
        raise HubConfigError(f"hub config {file} must be a YAML mapping")
    return loaded


def configure_from_file(c: Any, path: str | Path = DEFAULT_CONFIG_PATH) -> dict[str, Any]:
    """Configure the hub from the mounted hub config file (what the chart's config calls).

    Returns:
        The document read, for ``extraConfig`` snippets that want it.
    """
    values = load_config_file(path)
    configure_hub(c, values)
    return values
