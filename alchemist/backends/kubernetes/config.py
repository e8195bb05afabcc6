"""Configuration of the Kubernetes backend (traitlets).

Every setting can come from three places; the first that sets it wins:

1. Jupyter config: ``c.KubernetesBackend.<name> = ...`` in ``jupyter_server_config.py``
   (or ``.json``) anywhere on ``jupyter --paths``' config path. The kernel, where the
   magics run, reads these files too (:func:`load_jupyter_config`), so a setting in the
   server config applies to every way of submitting.
2. An environment variable ``ALCHEMIST_K8S_<NAME>`` (:data:`ENV_VARS`, derived from the
   traits tagged ``env=True``), which KubeSpawner sets per profile in the notebook pod.
   Dicts and lists are JSON.
3. The trait's default.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from traitlets import Bool, Dict, Float, HasTraits, Int, List, Unicode, default
from traitlets.config import Config, LoggingConfigurable

from alchemist.errors import BackendError

#: Prefix of the variables of this layer's settings.
ENV_PREFIX = "ALCHEMIST_K8S_"
#: /dev/shm of each worker when nothing sets it (the chart's default is this too).
DEFAULT_SHM_SIZE = "1Gi"

_SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def env_name(name: str) -> str:
    """The environment variable of setting ``name``."""
    return ENV_PREFIX + name.upper()


def env_settings(cls: type[HasTraits]) -> list[str]:
    """The names of ``cls``'s settings that an environment variable can set."""
    return sorted(cls.class_traits(env=True))


def read_env(cls: type[HasTraits], name: str) -> Any:
    """Setting ``name`` from its environment variable, parsed by its trait's type, or
    None when the variable is unset or empty.

    Raises:
        BackendError: the value does not parse (one line naming the variable).
    """
    var = env_name(name)
    raw = os.environ.get(var)
    if raw in (None, ""):
        return None
    trait = cls.class_traits()[name]
    try:
        if isinstance(trait, Bool):
            if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(raw)
            return raw.lower() in ("1", "true", "yes")
        if isinstance(trait, Int):
            return int(raw)
        if isinstance(trait, Float):
            return float(raw)
        if isinstance(trait, (Dict, List)):
            kind = dict if isinstance(trait, Dict) else list
            value = json.loads(raw)
            if not isinstance(value, kind):
                raise BackendError(f"{var} must be a JSON {kind.__name__}, got {raw!r}")
            return value
    except json.JSONDecodeError as e:
        shape = "object" if isinstance(trait, Dict) else "list"
        raise BackendError(f"{var} is not valid JSON ({e.msg}): set it to a JSON {shape}") from e
    except ValueError:
        wants = {Int: "an integer", Float: "a number", Bool: "true or false"}
        want = next((v for k, v in wants.items() if isinstance(trait, k)), "valid")
        raise BackendError(f"{var} must be {want}, got {raw!r}") from None
    return raw


def settings_table(cls: type[HasTraits]) -> str:
    """The Markdown table of ``cls``'s settings (docs/kubernetes.md holds it)."""
    rows = ["| setting | environment variable | default | meaning |", "| --- | --- | --- | --- |"]
    for name, trait in sorted(cls.class_traits(config=True).items()):
        if name in ("namespace", "image", "mount_path"):
            shown = "computed (see meaning)"
        else:
            value = trait.default()
            shown = "`" + (value if isinstance(value, str) else json.dumps(value)) + "`"
            shown = '`""`' if shown == "``" else shown
        first = (trait.help or "").strip().split("\n\n")[0]
        help_ = " ".join(first.split()).replace("|", "/")
        var = f"`{env_name(name)}`" if trait.metadata.get("env") else "—"
        rows.append(f"| `{name}` | {var} | {shown} | {help_} |")
    return "\n".join(rows) + "\n"


class KubernetesConfig(LoggingConfigurable):
    """Settings of the Kubernetes backend; :class:`KubernetesBackend` inherits them.

    Configure as ``c.KubernetesBackend.<name>`` (the backend class is the configurable
    users name); see the module docstring for the order of precedence. Each setting is
    declared once, here: its default, its help and (``env=True``) its environment
    variable ``ALCHEMIST_K8S_<NAME>``; the loader, :data:`ENV_VARS` and the table in
    ``docs/kubernetes.md`` (:func:`settings_table`) are derived from the declarations.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Precedence: Jupyter config and keyword arguments, then the variable, then the
        # trait's default (see the module docstring).
        given = set(kwargs) | self._configured()
        for name in env_settings(type(self)):
            if name in given:
                continue
            value = read_env(type(self), name)
            if value is not None:
                setattr(self, name, value)

    def _configured(self) -> set[str]:
        names: set[str] = set()
        for cls in type(self).__mro__:
            section = self.config.get(cls.__name__) if hasattr(cls, "__name__") else None
            if section:
                names.update(section)
        return names

    namespace = Unicode(
        help="""Namespace where jobs are created (the user's namespace).

        Default: $ALCHEMIST_K8S_NAMESPACE, else the namespace of the pod this runs in,
        else the current kubeconfig context's namespace, else 'default'.""",
    ).tag(config=True, env=True)

    @default("namespace")
    def _default_namespace(self) -> str:
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
    ).tag(config=True, env=True)

    @default("image")
    def _default_image(self) -> str:
        return os.environ.get("JUPYTER_IMAGE_SPEC", "")

    image_pull_policy = Unicode(
        "",
        help="imagePullPolicy of the worker container (Always, IfNotPresent, Never); '' = the cluster's default.",
    ).tag(config=True, env=True)

    pvc = Unicode(
        "",
        help="""Name of the ReadWriteMany PersistentVolumeClaim that holds ALCHEMIST_HOME.

        It is mounted in every worker pod at mount_path, where the notebook pod has it,
        so job directories (bundle, logs, metrics, checkpoints) are shared.""",
    ).tag(config=True, env=True)

    mount_path = Unicode(
        help="""Where the shared volume is mounted, in the notebook pod and in the workers.

        Job directories must lie under it. Default: $ALCHEMIST_K8S_MOUNT_PATH, else
        ALCHEMIST_HOME itself (the volume's root is ALCHEMIST_HOME).""",
    ).tag(config=True, env=True)

    @default("mount_path")
    def _default_mount_path(self) -> str:
        from alchemist.job.config import home

        return str(home())

    sub_path = Unicode(
        "",
        help="subPath of the volume to mount (for a shared claim with one folder per user); '' = the whole volume.",
    ).tag(config=True, env=True)

    gpu_resource = Unicode(
        "nvidia.com/gpu",
        help="Extended resource name that requests GPUs (e.g. nvidia.com/gpu, amd.com/gpu).",
    ).tag(config=True, env=True)

    node_selector = Dict(
        help="nodeSelector of the worker pods (env: a JSON object).",
    ).tag(config=True, env=True)

    tolerations = List(
        Dict(),
        help="tolerations of the worker pods, as Kubernetes dicts (env: a JSON list).",
    ).tag(config=True, env=True)

    datasets = List(
        Dict(),
        help="""Team data sets mounted read-only in every worker pod, as the notebook has them
        (env: a JSON list of {"claim": ..., "mountPath": ...}; the chart sets it from its
        datasets: values).""",
    ).tag(config=True, env=True)

    queue = Unicode(
        "",
        help="""Kueue LocalQueue name; '' = no Kueue.

        When set, the Job gets the label kueue.x-k8s.io/queue-name, so Kueue applies
        quotas, queues the job and admits all of its pods at once (or none).""",
    ).tag(config=True, env=True)

    service_account = Unicode(
        "",
        help="serviceAccountName of the worker pods; '' = the namespace's default (workers then get no API token).",
    ).tag(config=True, env=True)

    cpu = Unicode(
        "1",
        help="CPU request of each worker when the job sets none (a Kubernetes quantity, e.g. '4'); '' = none.",
    ).tag(config=True, env=True)

    memory = Unicode(
        "4Gi",
        help="Memory request and limit of each worker when the job sets none (e.g. '16Gi'); '' = none.",
    ).tag(config=True, env=True)

    priority_class = Unicode(
        "",
        help="priorityClassName of the worker pods; '' = the cluster's default.",
    ).tag(config=True, env=True)

    ttl = Int(
        3600,
        help="""ttlSecondsAfterFinished of the Job: seconds a finished Job and its pods are kept.

        Logs, metrics and the final state stay in the job directory after that.""",
    ).tag(config=True, env=True)

    shm_size = Unicode(
        DEFAULT_SHM_SIZE,
        help="""Size of the in-memory /dev/shm of each worker (data loader workers need it); '' = none.

        It counts against the worker's memory limit.""",
    ).tag(config=True, env=True)

    run_as_user = Int(
        None,
        allow_none=True,
        help="runAsUser of the worker pods; set it to the notebook's uid so both can write the shared job directory.",
    ).tag(config=True, env=True)

    run_as_group = Int(
        None,
        allow_none=True,
        help="runAsGroup (and fsGroup) of the worker pods; None = the image's.",
    ).tag(config=True, env=True)

    master_port = Int(
        29500,
        help="TCP port of the rendezvous (the c10d store on worker 0).",
    ).tag(config=True, env=True)

    context = Unicode(
        "",
        help="kubeconfig context to use outside a cluster; '' = the current context.",
    ).tag(config=True, env=True)

    request_timeout = Float(
        30.0,
        help="Seconds to wait for one Kubernetes API call.",
    ).tag(config=True, env=True)


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


#: setting name -> environment variable (derived from the declarations).
ENV_VARS: dict[str, str] = {name: env_name(name) for name in env_settings(KubernetesConfig)}
