"""The notebook pod of each profile, as KubeSpawner's own ``get_pod_manifest()`` builds
it from the chart's default values: golden files, validated strictly against the
Kubernetes 1.33 schema. No API server is involved (``get_pod_manifest`` needs none).

Regenerate the golden files after an intended change with
``ALCHEMIST_REGENERATE_GOLDEN=1 pytest tests/hub/kubernetes`` and review the diff.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from alchemist.hub.kubernetes import HubConfigError, profile_from_values
from tests.hub.kubernetes import spawning
from tests.hub.kubernetes.spawning import HUB_NAMESPACE, chart_hub_config, make_spawner

#: alice's own namespace (tenancy.mode namespaces, the chart's default).
USER_NAMESPACE = f"{HUB_NAMESPACE}-alice"

GOLDEN = Path(__file__).resolve().parent / "golden"
PROFILES = {"cpu": 0, "gpu-1": 1, "gpu-4": 4, "gpu-8": 8}


def normalize(pod: dict[str, Any]) -> dict[str, Any]:
    """Blank what changes with library versions, not with our configuration."""
    annotations = pod["metadata"]["annotations"]
    for key in ["hub.jupyter.org/kubespawner-version", "hub.jupyter.org/jupyterhub-version"]:
        assert key in annotations
        annotations[key] = "<version>"
    return pod


async def pod_manifest(values: dict[str, Any], profile: str) -> dict[str, Any]:
    return normalize(await spawning.pod_manifest(make_spawner(values), profile))


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_profile_pod_matches_golden_and_is_valid(helm: str, kubeconfig: Path, profile: str) -> None:
    values = chart_hub_config(helm)
    pod = asyncio.run(pod_manifest(values, profile))
    kubernetes_validate.validate(pod, "1.33.0", strict=True)

    golden = GOLDEN / f"pod-{profile}.yaml"
    rendered = yaml.safe_dump(pod, sort_keys=True)
    if os.environ.get("ALCHEMIST_REGENERATE_GOLDEN"):
        golden.write_text(rendered)
    assert golden.exists(), f"no golden file {golden.name}: run with ALCHEMIST_REGENERATE_GOLDEN=1"
    assert rendered == golden.read_text(), f"pod of {profile} differs from {golden.name}"


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_profile_pod_gets_its_gpus_and_the_backend_environment(
    helm: str, kubeconfig: Path, profile: str
) -> None:
    values = chart_hub_config(helm)
    pod = asyncio.run(pod_manifest(values, profile))
    spec = pod["spec"]
    (container,) = spec["containers"]
    gpus = PROFILES[profile]
    limits = container["resources"]["limits"]
    if gpus:
        assert limits["nvidia.com/gpu"] == str(gpus)
        assert container["resources"]["requests"]["nvidia.com/gpu"] == str(gpus)
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
            "tolerations"
        ]
    else:
        assert "nvidia.com/gpu" not in limits
        assert "tolerations" not in spec or not spec["tolerations"]

    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["ALCHEMIST_BACKEND"] == "kubernetes"
    assert env["ALCHEMIST_K8S_NAMESPACE"] == USER_NAMESPACE
    assert env["ALCHEMIST_K8S_IMAGE"] == "alchemist/worker:0.1.0"
    home = env["ALCHEMIST_HOME"]
    assert env["ALCHEMIST_K8S_MOUNT_PATH"] == home
    # The shared claim is mounted where ALCHEMIST_HOME points.
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    shared = next(n for n, p in mounts.items() if p == home)
    assert volumes[shared]["persistentVolumeClaim"]["claimName"] == env["ALCHEMIST_K8S_PVC"]
    assert volumes["home"]["persistentVolumeClaim"]["claimName"] == "claim-alice"
    # Non-root, and the account the hub grants the backend's rights to in her namespace.
    assert container["securityContext"]["runAsUser"] == 1000
    assert spec["serviceAccountName"] == "alchemist-user"
    assert spec["automountServiceAccountToken"] is True


def test_profile_node_selector_and_images_override_the_defaults(
    helm: str, kubeconfig: Path
) -> None:
    values = chart_hub_config(helm)
    values["singleuser"]["profiles"] = [
        {
            "slug": "a100",
            "displayName": "8 x A100",
            "gpus": 8,
            "image": "alchemist/notebook:0.1.0-a100",
            "workerImage": "alchemist/worker:0.1.0-a100",
            "nodeSelector": {"gpu-type": "a100"},
        }
    ]
    pod = asyncio.run(pod_manifest(values, "a100"))
    kubernetes_validate.validate(pod, "1.33.0", strict=True)
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["image"] == "alchemist/notebook:0.1.0-a100"
    assert env["ALCHEMIST_K8S_IMAGE"] == "alchemist/worker:0.1.0-a100"
    assert env["ALCHEMIST_K8S_NAMESPACE"] == USER_NAMESPACE  # the rest of the env is kept
    assert pod["spec"]["nodeSelector"] == {"gpu-type": "a100"}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"slug": "x", "displayName": "X", "gpu": 1}, "unknown key(s) ['gpu']"),
        ({"slug": "x", "displayName": "X", "gpus": -1}, "gpus must be a whole number"),
        ({"slug": "x", "displayName": "X", "cpu": {"limit": "four"}}, "cpu.limit must be a number"),
        ({"displayName": "X"}, "needs a 'slug'"),
    ],
)
def test_a_bad_profile_is_one_line_naming_the_key(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(HubConfigError) as info:
        profile_from_values(entry)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_post_start_hook_copies_examples_without_overwriting_edits(
    helm: str, kubeconfig: Path, tmp_path: Path
) -> None:
    """The notebook container's postStart command, run by a real sh as the kubelet runs
    it, with the image's examples folder moved to a temporary directory."""
    import subprocess

    from alchemist.hub.kubernetes.config import EXAMPLES_DIR

    pod = asyncio.run(pod_manifest(chart_hub_config(helm), "cpu"))
    (container,) = pod["spec"]["containers"]
    argv = container["lifecycle"]["postStart"]["exec"]["command"]
    examples = tmp_path / "image-notebooks"
    (examples / "tutorials").mkdir(parents=True)
    (examples / "quickstart.ipynb").write_text("original")
    (examples / "tutorials" / "bmuf.ipynb").write_text("original")
    home = tmp_path / "home"
    home.mkdir()
    argv = [a.replace(EXAMPLES_DIR, str(examples)) for a in argv]
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}

    subprocess.run(argv, env=env, check=True, timeout=30)
    assert (home / "examples" / "tutorials" / "bmuf.ipynb").read_text() == "original"
    (home / "examples" / "quickstart.ipynb").write_text("my edits")
    subprocess.run(argv, env=env, check=True, timeout=30)
    assert (home / "examples" / "quickstart.ipynb").read_text() == "my edits"


def test_spawn_page_offers_every_profile_and_maps_the_choice_back(
    helm: str, kubeconfig: Path
) -> None:
    """KubeSpawner's own spawn-page form lists each profile, and a submitted choice
    becomes the user option that selects it."""
    values = chart_hub_config(helm)

    async def form_and_choice() -> tuple[str, dict[str, Any]]:
        spawner = make_spawner(values)  # KubeSpawner wants a running loop for its client
        return spawner.options_form, spawner.options_from_form({"profile": ["gpu-8"]})

    form, choice = asyncio.run(form_and_choice())
    for name in ["CPU", "1 GPU", "4 GPUs", "8 GPUs"]:
        assert name in form
    for slug in PROFILES:
        assert f'value="{slug}"' in form
    assert choice == {"profile": "gpu-8"}
