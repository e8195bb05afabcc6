"""The notebook profiles a user picks from when the hub spawns a server on Kubernetes.

A profile is one entry of KubeSpawner's ``profile_list``: the notebook image, the CPU and
memory it is guaranteed and limited to, how many GPUs it gets, and the node selectors
and tolerations that put it on the right nodes. The chart's ``singleuser.profiles`` list
holds them (camelCase keys, the chart's dialect); :func:`profile_from_values` reads one,
:func:`make_profile_list` turns them into what ``c.KubeSpawner.profile_list`` takes.

This module imports nothing heavy (no torch, no kubernetes): the hub image has neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from alchemist.errors import HubConfigError

#: The extended resource NVIDIA's device plugin advertises.
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"

#: The toleration GPU node pools commonly carry (GKE and most device-plugin setups
#: taint GPU nodes with it), so GPU profiles tolerate it by default.
GPU_TOLERATION: dict[str, str] = {
    "key": "nvidia.com/gpu",
    "operator": "Exists",
    "effect": "NoSchedule",
}


_PROFILE_KEYS = frozenset(
    {
        "slug",
        "displayName",
        "description",
        "default",
        "image",
        "workerImage",
        "gpus",
        "cpu",
        "memory",
        "nodeSelector",
        "tolerations",
    }
)


@dataclass(frozen=True)
class Profile:
    """One notebook flavour.

    Attributes:
        slug: Machine-readable name, unique in the list (``[a-z0-9-]+``).
        display_name: What the spawn page shows.
        description: One line under the name on the spawn page.
        gpus: GPUs the notebook pod requests (0 for a CPU profile).
        cpu_guarantee: CPU cores requested, or None for the hub-wide default.
        cpu_limit: CPU cores the pod may use at most, or None.
        mem_guarantee: Memory requested (Kubernetes quantity such as ``"8G"``), or None.
        mem_limit: Memory limit (quantity), or None.
        image: Notebook image for this profile, or None for the chart-wide default.
        worker_image: Image the ``kubernetes`` backend runs workers in when a job is
            submitted from this profile, or None for the chart-wide default.
        node_selector: Labels a node must carry.
        tolerations: Kubernetes tolerations (dicts in the API's camelCase form).
        default: Whether the spawn page preselects this profile.
    """

    slug: str
    display_name: str
    description: str = ""
    gpus: int = 0
    cpu_guarantee: float | None = None
    cpu_limit: float | None = None
    mem_guarantee: str | None = None
    mem_limit: str | None = None
    image: str | None = None
    worker_image: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    default: bool = False

    def kubespawner_override(self, gpu_resource: str = DEFAULT_GPU_RESOURCE) -> dict[str, Any]:
        """The KubeSpawner settings this profile changes.

        Only what the profile sets is returned, so hub-wide settings stay in force for
        the rest. GPUs become an extended-resource limit and an equal request (the
        scheduler demands they match). ``environment`` is merged by KubeSpawner into the
        hub-wide environment, so the worker image override keeps the other variables.

        Args:
            gpu_resource: Extended-resource name of a GPU on this cluster.

        Returns:
            A dict of KubeSpawner trait names to values.
        """
        override: dict[str, Any] = {}
        if self.image:
            override["image"] = self.image
        if self.cpu_guarantee is not None:
            override["cpu_guarantee"] = self.cpu_guarantee
        if self.cpu_limit is not None:
            override["cpu_limit"] = self.cpu_limit
        if self.mem_guarantee is not None:
            override["mem_guarantee"] = self.mem_guarantee
        if self.mem_limit is not None:
            override["mem_limit"] = self.mem_limit
        if self.gpus:
            override["extra_resource_limits"] = {gpu_resource: str(self.gpus)}
            override["extra_resource_guarantees"] = {gpu_resource: str(self.gpus)}
        if self.node_selector:
            override["node_selector"] = dict(self.node_selector)
        if self.tolerations:
            override["tolerations"] = [dict(t) for t in self.tolerations]
        if self.worker_image:
            override["environment"] = {"ALCHEMIST_K8S_IMAGE": self.worker_image}
        return override

    def to_kubespawner(self, gpu_resource: str = DEFAULT_GPU_RESOURCE) -> dict[str, Any]:
        """This profile as one ``KubeSpawner.profile_list`` entry."""
        entry: dict[str, Any] = {
            "slug": self.slug,
            "display_name": self.display_name,
            "description": self.description,
            "kubespawner_override": self.kubespawner_override(gpu_resource),
        }
        if self.default:
            entry["default"] = True
        return entry


#: The four flavours the platform offers out of the box (the chart's defaults are the
#: same; a test keeps them in step).
DEFAULT_PROFILES: tuple[Profile, ...] = (
    Profile(
        slug="cpu",
        display_name="CPU",
        description="Prototype on CPU; submit distributed jobs to the cluster.",
        cpu_guarantee=1,
        cpu_limit=4,
        mem_guarantee="4G",
        mem_limit="16G",
        default=True,
    ),
    Profile(
        slug="gpu-1",
        display_name="1 GPU",
        description="One GPU for prototyping a training cell.",
        gpus=1,
        cpu_guarantee=4,
        cpu_limit=8,
        mem_guarantee="24G",
        mem_limit="48G",
        tolerations=(GPU_TOLERATION,),
    ),
    Profile(
        slug="gpu-4",
        display_name="4 GPUs",
        description="Four GPUs on one node.",
        gpus=4,
        cpu_guarantee=16,
        cpu_limit=32,
        mem_guarantee="96G",
        mem_limit="192G",
        tolerations=(GPU_TOLERATION,),
    ),
    Profile(
        slug="gpu-8",
        display_name="8 GPUs",
        description="A whole eight-GPU node.",
        gpus=8,
        cpu_guarantee=32,
        cpu_limit=64,
        mem_guarantee="192G",
        mem_limit="384G",
        tolerations=(GPU_TOLERATION,),
    ),
)


def _number(raw: Any, where: str) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise HubConfigError(f"{where} must be a number of cores, got {raw!r}")
    return raw


def _quantity(raw: Any, where: str) -> str | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise HubConfigError(f"{where} must be a memory quantity such as '8G', got {raw!r}")
    return str(raw)


def profile_from_values(values: Mapping[str, Any]) -> Profile:
    """Read one profile from the chart's ``singleuser.profiles`` entry.

    Args:
        values: ``{slug, displayName, description, default, image, workerImage, gpus,
            cpu: {guarantee, limit}, memory: {guarantee, limit}, nodeSelector,
            tolerations}``; all but ``slug`` and ``displayName`` optional.

    Returns:
        The profile.

    Raises:
        HubConfigError: On an unknown key or a value of the wrong type, naming it.
    """
    unknown = sorted(set(values) - _PROFILE_KEYS)
    slug = values.get("slug")
    if not isinstance(slug, str) or not slug:
        raise HubConfigError(f"every profile needs a 'slug' string; got {dict(values)!r}")
    where = f"singleuser.profiles[{slug}]"
    if unknown:
        raise HubConfigError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(_PROFILE_KEYS)}")
    gpus = values.get("gpus", 0)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise HubConfigError(f"{where}.gpus must be a whole number >= 0, got {gpus!r}")
    cpu = values.get("cpu") or {}
    memory = values.get("memory") or {}
    return Profile(
        slug=slug,
        display_name=str(values.get("displayName") or slug),
        description=str(values.get("description") or ""),
        gpus=gpus,
        cpu_guarantee=_number(cpu.get("guarantee"), f"{where}.cpu.guarantee"),
        cpu_limit=_number(cpu.get("limit"), f"{where}.cpu.limit"),
        mem_guarantee=_quantity(memory.get("guarantee"), f"{where}.memory.guarantee"),
        mem_limit=_quantity(memory.get("limit"), f"{where}.memory.limit"),
        image=values.get("image") or None,
        worker_image=values.get("workerImage") or None,
        node_selector=dict(values.get("nodeSelector") or {}),
        tolerations=tuple(values.get("tolerations") or ()),
        default=bool(values.get("default", False)),
    )


def make_profile_list(
    profiles: Sequence[Profile], gpu_resource: str = DEFAULT_GPU_RESOURCE
) -> list[dict[str, Any]]:
    """Turn profiles into ``c.KubeSpawner.profile_list``.

    Args:
        profiles: The flavours, in the order the spawn page lists them.
        gpu_resource: Extended-resource name of a GPU on this cluster.

    Returns:
        The list KubeSpawner takes.

    Raises:
        HubConfigError: If slugs repeat or more than one profile is the default.
    """
    slugs = [p.slug for p in profiles]
    repeated = sorted({s for s in slugs if slugs.count(s) > 1})
    if repeated:
        raise HubConfigError(f"profile slugs must be unique; repeated: {repeated}")
    defaults = [p.slug for p in profiles if p.default]
    if len(defaults) > 1:
        raise HubConfigError(f"only one profile may be the default; got {defaults}")
    return [p.to_kubespawner(gpu_resource) for p in profiles]
