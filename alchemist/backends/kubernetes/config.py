"""Configuration of the Kubernetes backend (traitlets).

Every setting can come from three places; the first that sets it wins:

1. Jupyter config: ``c.KubernetesBackend.<name> = ...`` in ``jupyter_server_config.py``
   (or ``.json``) anywhere on ``jupyter --paths``' config path. The kernel, where the
   magics run, reads these files too (:func:`load_jupyter_config`), so a setting in the
   server config applies to every way of submitting.
2. An environment variable ``ALCHEMIST_K8S_<NAME>`` (listed in :data:`ENV_VARS`), which
   KubeSpawner sets per profile in the notebook pod. Dicts and lists are JSON.
3. The built-in default.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from traitlets import Dict, Float, Int, List, Unicode, default
from traitlets.config import Config, LoggingConfigurable

from alchemist.errors import BackendError

#: trait name -> environment variable that sets its default (documented in docs/kubernetes.md)
ENV_VARS: dict[str, str] = {
    "namespace": "ALCHEMIST_K8S_NAMESPACE",
    "image": "ALCHEMIST_K8S_IMAGE",
    "image_pull_policy": "ALCHEMIST_K8S_IMAGE_PULL_POLICY",
    "pvc": "ALCHEMIST_K8S_PVC",
    "mount_path": "ALCHEMIST_K8S_MOUNT_PATH",
    "sub_path": "ALCHEMIST_K8S_SUB_PATH",
    "gpu_resource": "ALCHEMIST_K8S_GPU_RESOURCE",
    "node_selector": "ALCHEMIST_K8S_NODE_SELECTOR",
    "tolerations": "ALCHEMIST_K8S_TOLERATIONS",
    "queue": "ALCHEMIST_K8S_QUEUE",
    "service_account": "ALCHEMIST_K8S_SERVICE_ACCOUNT",
    "cpu": "ALCHEMIST_K8S_CPU",
    "memory": "ALCHEMIST_K8S_MEMORY",
    "priority_class": "ALCHEMIST_K8S_PRIORITY_CLASS",
    "ttl": "ALCHEMIST_K8S_TTL",
    "shm_size": "ALCHEMIST_K8S_SHM_SIZE",
    "run_as_user": "ALCHEMIST_K8S_RUN_AS_USER",
    "run_as_group": "ALCHEMIST_K8S_RUN_AS_GROUP",
    "master_port": "ALCHEMIST_K8S_MASTER_PORT",
    "context": "ALCHEMIST_K8S_CONTEXT",
    "request_timeout": "ALCHEMIST_K8S_REQUEST_TIMEOUT",
}

_SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _env(name: str) -> str | None:
    value = os.environ.get(ENV_VARS[name])
    return value if value not in (None, "") else None


def _env_json(name: str, kind: type) -> Any:
    raw = _env(name)
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise BackendError(
            f"{ENV_VARS[name]} is not valid JSON ({e.msg}): set it to a JSON {kind.__name__}"
        ) from e
    if not isinstance(value, kind):
        raise BackendError(f"{ENV_VARS[name]} must be a JSON {kind.__name__}, got {raw!r}")
    return value


def _env_int(name: str) -> int | None:
    raw = _env(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError as e:
        raise BackendError(f"{ENV_VARS[name]} must be an integer, got {raw!r}") from e


class KubernetesConfig(LoggingConfigurable):
    """Settings of the Kubernetes backend; :class:`KubernetesBackend` inherits them.

    Configure as ``c.KubernetesBackend.<name>`` (the backend class is the configurable
    users name); see the module docstring for the order of precedence.
    """

    namespace = Unicode(
        help="""Namespace where jobs are created (the user's namespace).

        Default: $ALCHEMIST_K8S_NAMESPACE, else the namespace of the pod this runs in,
        else the current kubeconfig context's namespace, else 'default'.""",
    ).tag(config=True)

    @default("namespace")
    def _default_namespace(self) -> str:
        env = _env("namespace")
        if env:
            return env
        try:
            return _SA_NAMESPACE_FILE.read_text().strip() or "default"
        except OSError:
            pass
        try:
            from kubernetes import config as kconfig

            _, active = kconfig.list_kube_config_contexts()
            return str(active.get("context", {}).get("namespace") or "default")
        except Exception:  # no kubeconfig: the API client will say so clearly
            return "default"

    image = Unicode(
        help="""Container image of the worker pods (needs torch and alchemist installed).

        A job's own image (submit(..., image=...)) wins. Default: $ALCHEMIST_K8S_IMAGE,
        else $JUPYTER_IMAGE_SPEC (the notebook's own image, which KubeSpawner exports),
        so workers run in exactly the notebook's environment.""",
    ).tag(config=True)

    @default("image")
    def _default_image(self) -> str:
        return _env("image") or os.environ.get("JUPYTER_IMAGE_SPEC", "")

    image_pull_policy = Unicode(
        help="imagePullPolicy of the worker container (Always, IfNotPresent, Never); '' = the cluster's default.",
    ).tag(config=True)

    @default("image_pull_policy")
    def _default_image_pull_policy(self) -> str:
        return _env("image_pull_policy") or ""

    pvc = Unicode(
        help="""Name of the ReadWriteMany PersistentVolumeClaim that holds ALCHEMIST_HOME.

        It is mounted in every worker pod at mount_path, where the notebook pod has it,
        so job directories (bundle, logs, metrics, checkpoints) are shared.""",
    ).tag(config=True)

    @default("pvc")
    def _default_pvc(self) -> str:
        return _env("pvc") or ""

    mount_path = Unicode(
        help="""Where the shared volume is mounted, in the notebook pod and in the workers.

        Job directories must lie under it. Default: $ALCHEMIST_K8S_MOUNT_PATH, else
        ALCHEMIST_HOME itself (the volume's root is ALCHEMIST_HOME).""",
    ).tag(config=True)

    @default("mount_path")
    def _default_mount_path(self) -> str:
        env = _env("mount_path")
        if env:
            return env
        from alchemist.config import home

        return str(home())

    sub_path = Unicode(
        help="subPath of the volume to mount (for a shared claim with one folder per user); '' = the whole volume.",
    ).tag(config=True)

    @default("sub_path")
    def _default_sub_path(self) -> str:
        return _env("sub_path") or ""

    gpu_resource = Unicode(
        help="Extended resource name that requests GPUs (e.g. nvidia.com/gpu, amd.com/gpu).",
    ).tag(config=True)

    @default("gpu_resource")
    def _default_gpu_resource(self) -> str:
        return _env("gpu_resource") or "nvidia.com/gpu"

    node_selector = Dict(
        help="nodeSelector of the worker pods (env: a JSON object).",
    ).tag(config=True)

    @default("node_selector")
    def _default_node_selector(self) -> dict[str, str]:
        return _env_json("node_selector", dict) or {}

    tolerations = List(
        Dict(),
        help="tolerations of the worker pods, as Kubernetes dicts (env: a JSON list).",
    ).tag(config=True)

    @default("tolerations")
    def _default_tolerations(self) -> list[dict[str, Any]]:
        return _env_json("tolerations", list) or []

    queue = Unicode(
        help="""Kueue LocalQueue name; '' = no Kueue.

        When set, the Job gets the label kueue.x-k8s.io/queue-name, so Kueue applies
        quotas, queues the job and admits all of its pods at once (or none).""",
    ).tag(config=True)

    @default("queue")
    def _default_queue(self) -> str:
        return _env("queue") or ""

    service_account = Unicode(
        help="serviceAccountName of the worker pods; '' = the namespace's default (workers then get no API token).",
    ).tag(config=True)

    @default("service_account")
    def _default_service_account(self) -> str:
        return _env("service_account") or ""

    cpu = Unicode(
        help="CPU request of each worker when the job sets none (a Kubernetes quantity, e.g. '4'); '' = none.",
    ).tag(config=True)

    @default("cpu")
    def _default_cpu(self) -> str:
        return _env("cpu") or "1"

    memory = Unicode(
        help="Memory request and limit of each worker when the job sets none (e.g. '16Gi'); '' = none.",
    ).tag(config=True)

    @default("memory")
    def _default_memory(self) -> str:
        return _env("memory") or "4Gi"

    priority_class = Unicode(
        help="priorityClassName of the worker pods; '' = the cluster's default.",
    ).tag(config=True)

    @default("priority_class")
    def _default_priority_class(self) -> str:
        return _env("priority_class") or ""

    ttl = Int(
        help="""ttlSecondsAfterFinished of the Job: seconds a finished Job and its pods are kept.

        Logs, metrics and the final state stay in the job directory after that.""",
    ).tag(config=True)

    @default("ttl")
    def _default_ttl(self) -> int:
        value = _env_int("ttl")
        return 3600 if value is None else value

    shm_size = Unicode(
        help="""Size of the in-memory /dev/shm of each worker (data loader workers need it); '' = none.

        It counts against the worker's memory limit.""",
    ).tag(config=True)

    @default("shm_size")
    def _default_shm_size(self) -> str:
        value = _env("shm_size")
        return "1Gi" if value is None else value

    run_as_user = Int(
        None,
        allow_none=True,
        help="runAsUser of the worker pods; set it to the notebook's uid so both can write the shared job directory.",
    ).tag(config=True)

    @default("run_as_user")
    def _default_run_as_user(self) -> int | None:
        return _env_int("run_as_user")

    run_as_group = Int(
        None,
        allow_none=True,
        help="runAsGroup (and fsGroup) of the worker pods; None = the image's.",
    ).tag(config=True)

    @default("run_as_group")
    def _default_run_as_group(self) -> int | None:
        return _env_int("run_as_group")

    master_port = Int(
        help="TCP port of the rendezvous (the c10d store on worker 0).",
    ).tag(config=True)

    @default("master_port")
    def _default_master_port(self) -> int:
        value = _env_int("master_port")
        return 29500 if value is None else value

    context = Unicode(
        help="kubeconfig context to use outside a cluster; '' = the current context.",
    ).tag(config=True)

    @default("context")
    def _default_context(self) -> str:
        return _env("context") or ""

    request_timeout = Float(
        help="Seconds to wait for one Kubernetes API call.",
    ).tag(config=True)

    @default("request_timeout")
    def _default_request_timeout(self) -> float:
        raw = _env("request_timeout")
        try:
            return float(raw) if raw else 30.0
        except ValueError as e:
            raise BackendError(
                f"ALCHEMIST_K8S_REQUEST_TIMEOUT must be a number, got {raw!r}"
            ) from e


def load_jupyter_config(section: str = "KubernetesBackend") -> Config:
    """Read ``c.<section>`` settings from the Jupyter server config files.

    The kernel that runs a magic is not the Jupyter server, so it never sees
    ``jupyter_server_config.py`` by itself; reading the same files here makes one
    setting apply everywhere. Files are read in ``jupyter --paths`` order (later ones,
    the user's, win). A file that fails to load is skipped with a warning.
    """
    import logging

    from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader

    try:
        from jupyter_core.paths import jupyter_config_path
    except ImportError:  # pragma: no cover - jupyter_core comes with ipykernel
        return Config()

    merged = Config()
    for directory in reversed(jupyter_config_path()):
        for loader_cls, fname in (
            (JSONFileConfigLoader, "jupyter_server_config.json"),
            (PyFileConfigLoader, "jupyter_server_config.py"),
        ):
            if not (Path(directory) / fname).is_file():
                continue
            try:
                merged.merge(loader_cls(fname, path=directory).load_config())
            except Exception as e:
                logging.getLogger(__name__).warning("skipping %s/%s: %s", directory, fname, e)
    result = Config()
    if section in merged:
        result[section] = merged[section]
    return result
