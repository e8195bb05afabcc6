"""Pure builders of the Kubernetes objects of one job (no API calls, no config reads).

Per job there are two objects, both named :func:`~.slugs.job_name` of the job id:

- an Indexed ``batch/v1`` Job with one pod per worker. Each pod runs torch's elastic
  launcher with ``--nnodes`` = workers and ``--node-rank`` = the pod's completion index,
  and rendezvous at pod 0 (``<job>-0.<service>``, port :attr:`Settings.master_port`).
  An interactive session's pods run an ipyparallel engine each instead, rank = index,
  pod 0 serving the store and the controller (:mod:`alchemist.interactive.engine`);
- a headless Service that gives the pods those DNS names. At creation it gets an
  ownerReference to the Job (whose uid only exists then), so deleting the Job deletes
  it too.

Restarts are the Job controller's, not torchrun's: a static (multi-node) torchrun
rendezvous cannot re-form a world across pods, so every pod runs torchrun with
``--max-restarts=0`` and the Job replaces failed pods. A group restart costs one failure
per pod, hence ``backoffLimit = max_restarts * workers``. The podFailurePolicy ignores
infrastructure disruption (node drain, preemption, eviction: ``DisruptionTarget``) so it
is retried without counting, and, when no restart was asked for, fails the Job at the
first non-zero exit instead of waiting for the other pods.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from alchemist.backends.kubernetes import slugs
from alchemist.backends.kubernetes.quota import parse_quantity
from alchemist.backends.launch import runtime_args, torchrun_args, worker_env
from alchemist.errors import BackendError
from alchemist.job.algorithms import needs_own_launcher
from alchemist.job.jobdir import JobDir
from alchemist.job.session import SESSION_ENTRY
from alchemist.job.spec import RANK_ENTRIES, JobSpec

LABEL_JOB_ID = "alchemist.dev/job-id"
LABEL_OWNER = "alchemist.dev/owner"
#: the owner and job id as given (labels only hold slugs of them)
ANNOTATION_OWNER = "alchemist.dev/owner"
ANNOTATION_JOB_ID = "alchemist.dev/job-id"
ANNOTATION_JOB_DIR = "alchemist.dev/job-dir"
LABEL_QUEUE = "kueue.x-k8s.io/queue-name"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
#: set by the Job controller on every pod of an Indexed Job
ANNOTATION_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

CONTAINER_NAME = "worker"
VOLUME_HOME = "alchemist-home"
VOLUME_SHM = "dshm"


def _default(name: str) -> Any:
    from alchemist.backends.kubernetes.config import KubernetesConfig

    return KubernetesConfig.class_traits()[name].default_value


@dataclass(frozen=True)
class Settings:
    """The cluster-side settings a manifest depends on (a snapshot of the config)."""

    namespace: str
    image: str
    pvc: str
    mount_path: str
    # The defaults are the settings' own (one declaration: KubernetesConfig).
    sub_path: str = _default("sub_path")
    image_pull_policy: str = _default("image_pull_policy")
    gpu_resource: str = _default("gpu_resource")
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    datasets: list[dict[str, Any]] = field(default_factory=list)
    queue: str = _default("queue")
    service_account: str = _default("service_account")
    cpu: str = _default("cpu")
    memory: str = _default("memory")
    priority_class: str = _default("priority_class")
    ttl: int = _default("ttl")
    shm_size: str = _default("shm_size")
    run_as_user: int | None = _default("run_as_user")
    run_as_group: int | None = _default("run_as_group")
    master_port: int = _default("master_port")


def selector_labels(job_id: str) -> dict[str, str]:
    """Labels that select every object and pod of one job."""
    return {LABEL_JOB_ID: slugs.label_value(job_id)}


def make_labels(job_id: str, owner: str, component: str) -> dict[str, str]:
    """Labels of a job's objects: ids for selection plus the standard ``app.kubernetes.io/*``."""
    return {
        LABEL_NAME: "alchemist",
        LABEL_INSTANCE: slugs.job_name(job_id),
        LABEL_COMPONENT: component,
        LABEL_MANAGED_BY: "alchemist",
        **selector_labels(job_id),
        LABEL_OWNER: slugs.label_value(owner),
    }


def make_annotations(job_id: str, owner: str, job_dir: JobDir) -> dict[str, str]:
    return {
        ANNOTATION_JOB_ID: job_id,
        ANNOTATION_OWNER: owner,
        ANNOTATION_JOB_DIR: str(job_dir.root),
    }


def master_address(job_id: str) -> str:
    """Host name of worker 0 as the other workers resolve it: ``<job>-0.<service>``."""
    name = slugs.job_name(job_id)
    return f"{name}-0.{name}"


def make_worker_command(
    job_id: str, spec: JobSpec, job_dir: JobDir, settings: Settings
) -> list[str]:
    """The container command of every pod (``$(JOB_COMPLETION_INDEX)`` is expanded by Kubernetes)."""
    if spec.entry == SESSION_ENTRY:
        # An interactive session's rank: an ipyparallel engine, rank 0's pod also serving
        # the store and the controller (alchemist.interactive.engine).
        return [
            "python",
            "-m",
            RANK_ENTRIES[SESSION_ENTRY].module,
            *RANK_ENTRIES[SESSION_ENTRY].argv(str(job_dir.root), "$(JOB_COMPLETION_INDEX)"),
            f"--master-addr={master_address(job_id)}",
            f"--master-port={settings.master_port}",
        ]
    if needs_own_launcher(spec.algorithm):
        # Horovod's own gloo rendezvous, run by pod 0; each pod starts its ranks as
        # horovodrun would (alchemist.backends.horovod_pod).
        return [
            "python",
            "-m",
            "alchemist.backends.horovod_pod",
            str(job_dir.root),
            "--index=$(JOB_COMPLETION_INDEX)",
            f"--workers={spec.workers}",
            f"--procs={spec.procs_per_worker}",
            f"--addr={master_address(job_id)}",
            f"--master-port={settings.master_port}",
            *(["--gpus"] if spec.resources.gpus else []),
        ]
    # Restarts are done by the Job controller (see the module docstring).
    launch_spec = dataclasses.replace(spec, max_restarts=0)
    return [
        "python",
        "-m",
        "torch.distributed.run",
        *torchrun_args(
            launch_spec,
            nnodes=spec.workers,
            node_rank="$(JOB_COMPLETION_INDEX)",
            master_addr=master_address(job_id),
            master_port=settings.master_port,
        ),
        *runtime_args(job_dir),
    ]


def make_worker_env(
    job_id: str, owner: str, spec: JobSpec, job_dir: JobDir
) -> list[dict[str, Any]]:
    """The container env: the completion index, the runtime's variables, the user's ``env``."""
    env: list[dict[str, Any]] = [
        {
            # The Job controller injects this too; declaring it makes the $(...)
            # expansion in the command explicit and visible in the dry run.
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {
                "fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_COMPLETION_INDEX}']"}
            },
        }
    ]
    values = {
        # Workers see the same ALCHEMIST_HOME and owner as the notebook.
        "ALCHEMIST_HOME": str(job_dir.root.parent.parent),
        "JUPYTERHUB_USER": owner,
    }
    cpus = float(parse_quantity(spec.resources.cpu)) if spec.resources.cpu else None
    values.update(worker_env(job_id, job_dir, spec, cpus))
    env += [{"name": k, "value": v} for k, v in values.items()]
    return env


def make_resources(spec: JobSpec, settings: Settings) -> dict[str, Any]:
    """Requests and limits of one worker container.

    Memory request = limit (a worker that outgrows it is OOM-killed, not its neighbour);
    no CPU limit (throttling slows collectives); GPUs as the configured extended resource.
    """
    cpu = spec.resources.cpu or settings.cpu
    memory = spec.resources.memory or settings.memory
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if cpu:
        requests["cpu"] = str(cpu)
    if memory:
        requests["memory"] = str(memory)
        limits["memory"] = str(memory)
    if spec.resources.gpus:
        requests[settings.gpu_resource] = str(spec.resources.gpus)
        limits[settings.gpu_resource] = str(spec.resources.gpus)
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def check_job_dir(job_dir: JobDir, settings: Settings) -> None:
    """Raise :class:`BackendError` unless the job directory lies on the shared volume."""
    root = PurePosixPath(str(job_dir.root))
    mount = PurePosixPath(settings.mount_path)
    if not root.is_absolute() or not root.is_relative_to(mount):
        raise BackendError(
            f"job directory {root} is not on the shared volume mounted at {mount}: put"
            " ALCHEMIST_HOME under it or set c.KubernetesBackend.mount_path"
            " (ALCHEMIST_K8S_MOUNT_PATH)"
        )


#: Every worker container's security context: what the `restricted` Pod Security
#: standard asks (no privilege escalation, no capabilities, a non-root user, the
#: runtime's seccomp profile). A rank needs none of what it takes away.
CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def make_pod_template(
    job_id: str, owner: str, spec: JobSpec, job_dir: JobDir, settings: Settings
) -> dict[str, Any]:
    """The pod template of the Job: one worker container, the shared volume, /dev/shm."""
    name = slugs.job_name(job_id)
    image = spec.image or settings.image
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": make_worker_command(job_id, spec, job_dir, settings),
        "env": make_worker_env(job_id, owner, spec, job_dir),
        "ports": [{"name": "rendezvous", "containerPort": settings.master_port, "protocol": "TCP"}],
        "resources": make_resources(spec, settings),
        "volumeMounts": [
            {
                "name": VOLUME_HOME,
                "mountPath": settings.mount_path,
                **({"subPath": settings.sub_path} if settings.sub_path else {}),
            }
        ],
        "workingDir": str(job_dir.root),
        # The tail of the log becomes the termination message of a failed worker, which
        # status() shows as the reason.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        # The `restricted` Pod Security standard, which user namespaces enforce.
        "securityContext": copy.deepcopy(CONTAINER_SECURITY),
    }
    if settings.image_pull_policy:
        container["imagePullPolicy"] = settings.image_pull_policy
    volumes: list[dict[str, Any]] = [
        {"name": VOLUME_HOME, "persistentVolumeClaim": {"claimName": settings.pvc}}
    ]
    for i, ds in enumerate(settings.datasets):
        try:
            claim, mount = str(ds["claim"]), str(ds["mountPath"])
        except KeyError as e:
            raise BackendError(
                f"dataset {i} of ALCHEMIST_K8S_DATASETS has no {e.args[0]!r}: each is"
                ' {"claim": ..., "mountPath": ...}'
            ) from None
        container["volumeMounts"].append(
            {"name": f"dataset-{i}", "mountPath": mount, "readOnly": True}
        )
        volumes.append(
            {
                "name": f"dataset-{i}",
                "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
            }
        )
    if settings.shm_size:
        container["volumeMounts"].append({"name": VOLUME_SHM, "mountPath": "/dev/shm"})
        volumes.append(
            {"name": VOLUME_SHM, "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}}
        )
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # With the headless Service of the same name, pod <job>-<i> resolves as
        # <job>-<i>.<job>: the rendezvous address.
        "subdomain": name,
        "containers": [container],
        "volumes": volumes,
    }
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    else:
        # Workers need no API access unless an admin grants an account on purpose.
        pod_spec["automountServiceAccountToken"] = False
    if settings.priority_class:
        pod_spec["priorityClassName"] = settings.priority_class
    if settings.node_selector:
        pod_spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in settings.tolerations]
    security: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    if settings.run_as_user is not None:
        security["runAsUser"] = settings.run_as_user
    if settings.run_as_group is not None:
        security["runAsGroup"] = settings.run_as_group
        security["fsGroup"] = settings.run_as_group
    pod_spec["securityContext"] = security
    return {
        "metadata": {
            "labels": make_labels(job_id, owner, "worker"),
            "annotations": make_annotations(job_id, owner, job_dir),
        },
        "spec": pod_spec,
    }


def make_pod_failure_policy(spec: JobSpec) -> dict[str, Any]:
    """Retry infrastructure disruption for free; without restarts, fail at the first error."""
    rules: list[dict[str, Any]] = [
        {
            "action": "Ignore",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
        }
    ]
    if spec.max_restarts == 0:
        rules.append(
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": CONTAINER_NAME,
                    "operator": "NotIn",
                    "values": [0],
                },
            }
        )
    return {"rules": rules}


def make_job(
    job_id: str, owner: str, spec: JobSpec, job_dir: JobDir, settings: Settings
) -> dict[str, Any]:
    """The Indexed ``batch/v1`` Job: ``workers`` pods that must all succeed."""
    labels = make_labels(job_id, owner, "worker")
    if settings.queue:
        labels[LABEL_QUEUE] = settings.queue
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.workers,
        "parallelism": spec.workers,
        "backoffLimit": spec.max_restarts * spec.workers,
        "podFailurePolicy": make_pod_failure_policy(spec),
        "ttlSecondsAfterFinished": settings.ttl,
        "template": make_pod_template(job_id, owner, spec, job_dir, settings),
    }
    if spec.timeout is not None:
        job_spec["activeDeadlineSeconds"] = max(1, math.ceil(spec.timeout))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": slugs.job_name(job_id),
            "namespace": settings.namespace,
            "labels": labels,
            "annotations": make_annotations(job_id, owner, job_dir),
        },
        "spec": job_spec,
    }


def make_service(job_id: str, owner: str, settings: Settings) -> dict[str, Any]:
    """The headless Service that names the pods for the rendezvous."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": slugs.job_name(job_id),
            "namespace": settings.namespace,
            "labels": make_labels(job_id, owner, "rendezvous"),
        },
        "spec": {
            "clusterIP": "None",
            "selector": selector_labels(job_id),
            # Workers resolve each other before any of them is "ready".
            "publishNotReadyAddresses": True,
            "ports": [
                {
                    "name": "rendezvous",
                    "port": settings.master_port,
                    "targetPort": settings.master_port,
                    "protocol": "TCP",
                }
            ],
        },
    }


def make_manifests(
    job_id: str, owner: str, spec: JobSpec, job_dir: JobDir, settings: Settings
) -> list[dict[str, Any]]:
    """Every object of one job, in creation order: the Job, then its Service.

    Raises:
        BackendError: no image or volume is configured, or the job directory is not on
            the shared volume (each message names the setting to fix).
    """
    if not (spec.image or settings.image):
        raise BackendError(
            "no worker image: set c.KubernetesBackend.image (ALCHEMIST_K8S_IMAGE) or pass image=..."
        )
    if not settings.pvc:
        raise BackendError(
            "no shared volume: set c.KubernetesBackend.pvc (ALCHEMIST_K8S_PVC) to the"
            " ReadWriteMany claim that holds ALCHEMIST_HOME"
        )
    check_job_dir(job_dir, settings)
    return [
        make_job(job_id, owner, spec, job_dir, settings),
        make_service(job_id, owner, settings),
    ]


def owner_reference(job: dict[str, Any]) -> dict[str, Any]:
    """An ownerReference to a created Job (``job`` as returned by the API server)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
        "controller": False,
        "blockOwnerDeletion": False,
    }
