"""Golden manifests of the Kubernetes backend, validated against the real Kubernetes schema.

Every object the backend would create is checked by kubernetes-validate against the
OpenAPI schema of Kubernetes 1.33 in strict mode (unknown fields fail), and the whole
dry run of each feature is compared with a golden file in ``golden/``. After an
intended change, regenerate them with ``ALCHEMIST_REGEN_GOLDEN=1 pytest tests/backends/kubernetes``
and review the diff. No API server is involved here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from traitlets.config import Config

from alchemist.backends.api import JobRequest
from alchemist.backends.kubernetes import ENV_VARS, KubernetesBackend, slugs
from alchemist.errors import BackendError, SpecError
from alchemist.job.jobdir import JobDir
from alchemist.job.session import session_spec
from alchemist.job.spec import JobSpec, Resources

GOLDEN = Path(__file__).parent / "golden"
K8S_VERSION = "1.33.0"
HOME = "/home/jovyan/.alchemist"
JOB_ID = "j0a1b2c3d4e"

BASE = {
    "namespace": "team-ml",
    "image": "registry.example/alchemist/worker:0.1.0",
    "pvc": "alchemist-home",
    "mount_path": "/home/jovyan",
    "cpu": "4",
    "memory": "16Gi",
    "shm_size": "2Gi",
    "ttl": 3600,
}

FEATURES: dict[str, tuple[dict[str, Any], JobSpec]] = {
    "cpu": ({}, JobSpec(name="cpu", workers=2, backend="kubernetes")),
    "gpu": (
        {
            "gpu_resource": "nvidia.com/gpu",
            "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
        JobSpec(
            name="resnet",
            workers=8,
            resources=Resources(gpus=8, cpu="64", memory="512Gi"),
            backend="kubernetes",
        ),
    ),
    "volumes": (
        {
            "sub_path": "home/alice",
            "run_as_user": 1000,
            "run_as_group": 100,
            "shm_size": "8Gi",
            "datasets": [{"claim": "dataset-imagenet", "mountPath": "/datasets/imagenet"}],
        },
        JobSpec(name="vol", workers=2, backend="kubernetes"),
    ),
    "kueue": (
        {
            "queue": "team-ml-queue",
            "priority_class": "batch-low",
            "service_account": "alchemist-worker",
        },
        JobSpec(name="queued", workers=4, resources=Resources(gpus=1), backend="kubernetes"),
    ),
    "restarts": (
        {},
        JobSpec(name="elastic", workers=3, max_restarts=2, timeout=7200.5, backend="kubernetes"),
    ),
    "env": (
        {"image_pull_policy": "Always"},
        JobSpec(
            name="env",
            workers=2,
            # OMP_NUM_THREADS: a runtime default the user's value replaces (the variables
            # the runtime owns, ALCHEMIST_JOB_ID say, are refused at submit instead)
            env={"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4", "WANDB_MODE": "offline"},
            image="registry.example/custom:1",
            backend="kubernetes",
        ),
    ),
    "horovod": (
        {"gpu_resource": "nvidia.com/gpu"},
        JobSpec(
            name="hvd",
            workers=2,
            resources=Resources(gpus=4),
            algorithm="horovod",
            backend="kubernetes",
        ),
    ),
    # an interactive session: each pod an ipyparallel engine, rank = completion index
    "session": (
        {"gpu_resource": "nvidia.com/gpu"},
        session_spec(2, 1, "explore", {}, backend="kubernetes"),
    ),
}


@pytest.fixture(autouse=True)
def _no_k8s_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [*ENV_VARS.values(), "JUPYTER_IMAGE_SPEC"]:
        monkeypatch.delenv(var, raising=False)


def make_backend(**values: Any) -> KubernetesBackend:
    return KubernetesBackend(config=Config(), **{**BASE, **values})


def request(spec: JobSpec, job_id: str = JOB_ID, owner: str = "alice@example.org") -> JobRequest:
    return JobRequest(job_id, owner, spec, JobDir(Path(HOME) / "jobs" / job_id))


def validate(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_golden_manifest(feature: str) -> None:
    """The dry run of each feature matches its golden file, and every object is valid."""
    settings, spec = FEATURES[feature]
    info = make_backend(**settings).dryrun(request(spec))
    for doc in info.request["manifests"]:
        validate(doc)
    # the text is the request, exactly
    assert list(yaml.safe_load_all(info.text)) == info.request["manifests"]
    path = GOLDEN / f"{feature}.yaml"
    if os.environ.get("ALCHEMIST_REGEN_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(info.text)
    assert path.exists(), f"no golden file {path.name}: run with ALCHEMIST_REGEN_GOLDEN=1"
    assert info.text == path.read_text()


def test_goldens_show_each_feature() -> None:
    """The golden files really contain what their feature is about (guards a bad regen)."""
    docs = {f: list(yaml.safe_load_all((GOLDEN / f"{f}.yaml").read_text())) for f in FEATURES}
    hvd = docs["horovod"][0]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert hvd[:3] == ["python", "-m", "alchemist.backends.horovod_pod"]
    assert "--procs=4" in hvd and "--gpus" in hvd and "--index=$(JOB_COMPLETION_INDEX)" in hvd
    gpu_pod = docs["gpu"][0]["spec"]["template"]["spec"]
    worker = gpu_pod["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "--nproc-per-node=8" in worker["command"]
    assert "--nnodes=8" in worker["command"]
    assert gpu_pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    vol_pod = docs["volumes"][0]["spec"]["template"]["spec"]
    assert vol_pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "alchemist-home"
    assert vol_pod["containers"][0]["volumeMounts"][0] == {
        "name": "alchemist-home",
        "mountPath": "/home/jovyan",
        "subPath": "home/alice",
    }
    assert vol_pod["securityContext"] == {
        "runAsUser": 1000,
        "runAsGroup": 100,
        "fsGroup": 100,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    # A team data set is mounted read-only, from its claim, at its path.
    assert {"name": "dataset-0", "mountPath": "/datasets/imagenet", "readOnly": True} in (
        vol_pod["containers"][0]["volumeMounts"]
    )
    assert {
        "name": "dataset-0",
        "persistentVolumeClaim": {"claimName": "dataset-imagenet", "readOnly": True},
    } in vol_pod["volumes"]
    # Every golden passes the `restricted` Pod Security standard's container checks.
    for feature, objects in docs.items():
        for c in objects[0]["spec"]["template"]["spec"]["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {
                "drop": ["ALL"]
            }, feature
    assert docs["kueue"][0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-ml-queue"
    restarts = docs["restarts"][0]["spec"]
    assert restarts["backoffLimit"] == 6 and restarts["activeDeadlineSeconds"] == 7201
    assert [r["action"] for r in restarts["podFailurePolicy"]["rules"]] == ["Ignore"]
    env = {
        e["name"]: e.get("value")
        for e in docs["env"][0]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["NCCL_DEBUG"] == "INFO" and env["OMP_NUM_THREADS"] == "4"


def test_rendezvous_wiring() -> None:
    """Pods find worker 0 through the headless Service: names, subdomain, selector, port."""
    job, svc = make_backend().dryrun(request(FEATURES["cpu"][1])).request["manifests"]
    name = job["metadata"]["name"]
    pod = job["spec"]["template"]
    cmd = pod["spec"]["containers"][0]["command"]
    assert cmd[:3] == ["python", "-m", "torch.distributed.run"]
    assert "--node-rank=$(JOB_COMPLETION_INDEX)" in cmd
    assert f"--master-addr={name}-0.{name}" in cmd
    assert "--master-port=29500" in cmd
    assert "--max-restarts=0" in cmd  # restarts are the Job controller's
    assert cmd[-3:] == ["-m", "alchemist.runtime", f"{HOME}/jobs/{JOB_ID}"]
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    assert pod["spec"]["subdomain"] == svc["metadata"]["name"] == name
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert svc["spec"]["ports"][0]["port"] == 29500
    # the longest pod hostname (<job>-<index>) is still a DNS label
    assert slugs.is_dns_label(f"{name}-99999")


def test_labels_are_valid_for_any_owner_and_id() -> None:
    """Owners like e-mail addresses and odd ids still give valid names and labels."""
    spec = JobSpec(name="x", workers=1, backend="kubernetes")
    req = request(spec, job_id="J_" + "x" * 80, owner="Alice Smith@EXAMPLE.org")
    for doc in make_backend().dryrun(req).request["manifests"]:
        validate(doc)
        assert slugs.is_dns_label(doc["metadata"]["name"])
        assert len(doc["metadata"]["name"]) <= slugs.MAX_JOB_NAME
        for value in doc["metadata"]["labels"].values():
            assert slugs.is_label_value(value), value
    job = make_backend().dryrun(req).request["manifests"][0]
    assert job["metadata"]["annotations"]["alchemist.dev/owner"] == "Alice Smith@EXAMPLE.org"


def test_slugs_do_not_collide() -> None:
    assert slugs.label_value("a@b") != slugs.label_value("a#b")
    assert slugs.job_name("A") != slugs.job_name("a")
    assert slugs.job_name("j0a1b2c3d4e") == "alchemist-j0a1b2c3d4e"
    assert slugs.label_value("alice") == "alice"


@pytest.mark.parametrize(
    ("values", "fix"),
    [
        ({"image": ""}, "c.KubernetesBackend.image"),
        ({"pvc": ""}, "c.KubernetesBackend.pvc"),
        ({"mount_path": "/data"}, "c.KubernetesBackend.mount_path"),
    ],
)
def test_missing_settings_name_the_fix(values: dict[str, Any], fix: str) -> None:
    with pytest.raises(BackendError) as e:
        make_backend(**values).dryrun(request(FEATURES["cpu"][1]))
    assert fix in str(e.value) and "\n" not in str(e.value)


def test_invalid_spec_is_a_spec_error() -> None:
    with pytest.raises(SpecError):
        make_backend().dryrun(request(JobSpec(name="x", workers=0, backend="kubernetes")))


def test_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables KubeSpawner sets in the notebook pod configure the backend."""
    monkeypatch.setenv("ALCHEMIST_K8S_NAMESPACE", "u-alice")
    monkeypatch.setenv("JUPYTER_IMAGE_SPEC", "registry.example/notebook:7")
    monkeypatch.setenv("ALCHEMIST_K8S_PVC", "home-alice")
    monkeypatch.setenv("ALCHEMIST_K8S_MOUNT_PATH", "/home/jovyan")
    monkeypatch.setenv("ALCHEMIST_K8S_NODE_SELECTOR", '{"pool": "gpu"}')
    monkeypatch.setenv("ALCHEMIST_K8S_TOLERATIONS", '[{"key": "gpu", "operator": "Exists"}]')
    monkeypatch.setenv("ALCHEMIST_K8S_QUEUE", "q")
    monkeypatch.setenv("ALCHEMIST_K8S_TTL", "60")
    monkeypatch.setenv("ALCHEMIST_K8S_RUN_AS_USER", "1000")
    b = KubernetesBackend(config=Config())
    s = b.settings()
    assert (s.namespace, s.image, s.pvc, s.queue, s.ttl, s.run_as_user) == (
        "u-alice",
        "registry.example/notebook:7",
        "home-alice",
        "q",
        60,
        1000,
    )
    assert s.node_selector == {"pool": "gpu"} and s.tolerations[0]["key"] == "gpu"
    # explicit config wins over the environment
    c = Config()
    c.KubernetesBackend.namespace = "from-config"
    assert KubernetesBackend(config=c).namespace == "from-config"


def test_bad_env_json_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALCHEMIST_K8S_TOLERATIONS", "{not json")
    with pytest.raises(BackendError, match="ALCHEMIST_K8S_TOLERATIONS"):
        KubernetesBackend(config=Config()).settings()


def test_jupyter_server_config_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``c.KubernetesBackend.*`` in jupyter_server_config.py applies to a backend made in a kernel."""
    (tmp_path / "jupyter_server_config.py").write_text(
        "c = get_config()\n"
        "c.KubernetesBackend.queue = 'from-server-config'\n"
        "c.KubernetesBackend.gpu_resource = 'amd.com/gpu'\n"
        "c.ServerApp.port = 9999\n"
    )
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", str(tmp_path))
    b = KubernetesBackend()
    assert b.queue == "from-server-config" and b.gpu_resource == "amd.com/gpu"


def test_every_trait_has_help_and_env_var() -> None:
    traits = KubernetesBackend.class_traits(config=True)
    assert set(traits) == set(ENV_VARS)
    for name, trait in traits.items():
        assert trait.help, name


def test_strict_validation_catches_a_wrong_field() -> None:
    """The schema check is not vacuous: a misspelt field in our Job is rejected."""
    job = make_backend().dryrun(request(FEATURES["cpu"][1])).request["manifests"][0]
    job["spec"]["template"]["spec"]["containers"][0]["comand"] = ["x"]
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(job)


def test_dry_run_does_not_import_the_client(tmp_path: Path) -> None:
    """``--dry-run`` stays fast: the (seconds to import) kubernetes client is not loaded."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from alchemist.backends import get_backend\n"
        "from alchemist.backends.api import JobRequest\n"
        "from alchemist.job.jobdir import JobDir\n"
        "from alchemist.job.spec import JobSpec\n"
        "b = get_backend('kubernetes')\n"
        f"jd = JobDir(Path({str(tmp_path)!r}) / 'jobs' / 'j1')\n"
        "info = b.dryrun(JobRequest('j1', 'u', JobSpec(workers=2, backend='kubernetes'), jd))\n"
        "assert 'kind: Job' in info.text\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))\n"
    )
    env = {
        **os.environ,
        "ALCHEMIST_HOME": str(tmp_path),
        "ALCHEMIST_K8S_NAMESPACE": "ns",
        "ALCHEMIST_K8S_IMAGE": "img",
        "ALCHEMIST_K8S_PVC": "pvc",
        "JUPYTER_CONFIG_DIR": str(tmp_path),
        "JUPYTER_CONFIG_PATH": str(tmp_path),
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_docs_list_every_setting_and_variable() -> None:
    """docs/kubernetes.md is what the KubeSpawner profiles are written from: keep it complete."""
    doc = (Path(__file__).parents[3] / "docs" / "kubernetes.md").read_text()
    for name, var in ENV_VARS.items():
        assert f"| `{name}` | `{var}` |" in doc, name
