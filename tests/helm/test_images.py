"""The container images' sources: Dockerfiles linted by hadolint, each image's
requirements pinned by the one lock (``requirements.lock``) that the venv is installed
with, and the lock consistent with pyproject.toml.

tests/images builds and runs the images; these checks are quick and need no builder,
and catch what would break a build or ship an image without a dependency it needs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "images"
NAMES = ["hub", "notebook", "worker"]
#: Distribution name -> import name, where they differ.
IMPORT_NAMES = {"ipython": "IPython", "pyyaml": "yaml", "nvidia-ml-py": "pynvml"}


def lock() -> dict[str, str]:
    """``{canonical name: version}`` of ``requirements.lock``.

    Raises:
        AssertionError: On a line that is not an exact ``name==version`` pin, or a repeat.
    """
    found: dict[str, str] = {}
    for raw in (REPO / "requirements.lock").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([0-9][A-Za-z0-9.!-]*)", line)
        assert match, f"requirements.lock: {line!r} is not an exact pin (rerun scripts/lock.sh)"
        name = canonicalize_name(match[1])
        assert name not in found, f"requirements.lock pins {name} twice"
        found[name] = match[2]
    return found


def requirement_names(image: str) -> list[str]:
    """The packages ``images/<image>/requirements.txt`` names: bare names, no versions."""
    found: list[str] = []
    for raw in (IMAGES / image / "requirements.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        assert re.fullmatch(r"[A-Za-z0-9._-]+", line), (
            f"images/{image}/requirements.txt: {line!r}: name the package only,"
            " its version is requirements.lock's"
        )
        found.append(canonicalize_name(line))
    return found


def pins(image: str) -> dict[str, str]:
    """``{canonical name: version}`` the image installs: its names at the lock's versions."""
    pinned = lock()
    missing = [n for n in requirement_names(image) if n not in pinned]
    assert not missing, f"images/{image} installs {missing}, which requirements.lock does not pin"
    return {n: pinned[n] for n in requirement_names(image)}


def pyproject() -> dict[str, list[Requirement]]:
    """pyproject's requirements: ``"runtime"`` and one entry per extra."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"runtime": [Requirement(r) for r in project["dependencies"]]}
    for extra, reqs in project.get("optional-dependencies", {}).items():
        groups[extra] = [
            Requirement(r) for r in reqs if canonicalize_name(Requirement(r).name) != "alchemist"
        ]
    return groups


def names(reqs: list[Requirement]) -> set[str]:
    return {canonicalize_name(r.name) for r in reqs}


def dockerfile(image: str) -> str:
    return (IMAGES / image / "Dockerfile").read_text()


@pytest.mark.parametrize("image", NAMES)
def test_every_requirement_is_pinned_by_the_lock(image: str) -> None:
    assert pins(image)


def test_the_venv_is_installed_at_the_locks_versions() -> None:
    """What CI tests is what the images install: every package of this venv (set up by
    scripts/setup.sh with ``-c requirements.lock``) at the lock's version, and nothing
    the lock leaves out."""
    from importlib import metadata

    installed = {
        canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()
    }
    installed.pop("jupyter-alchemist", None)  # this checkout, installed editable
    installed.pop("pip", None)
    pinned = lock()
    wrong = {
        n: (v, installed.get(n))
        for n, v in pinned.items()
        if installed.get(n, "").split("+")[0] != v
    }
    assert not wrong, f"lock version vs venv's (rerun scripts/setup.sh): {wrong}"
    unlocked = sorted(set(installed) - set(pinned))
    assert not unlocked, f"installed but not in requirements.lock (run scripts/lock.sh): {unlocked}"


def test_pins_satisfy_pyproject() -> None:
    specifiers = {
        canonicalize_name(r.name): r.specifier for reqs in pyproject().values() for r in reqs
    }
    for name, version in lock().items():
        if name in specifiers:
            assert specifiers[name].contains(version, prereleases=True), (
                f"requirements.lock pins {name}=={version}, pyproject wants {specifiers[name]}"
            )


def test_worker_installs_every_runtime_dependency() -> None:
    groups = pyproject()
    missing = (names(groups["runtime"]) | names(groups["gpu"])) - set(pins("worker"))
    assert not missing, f"add to images/worker/requirements.txt: {sorted(missing)}"


def test_notebook_installs_lab_hub_kubernetes_and_examples() -> None:
    groups = pyproject()
    installed = set(pins("worker")) | set(pins("notebook"))
    wanted = (
        names(groups["runtime"])
        | names(groups["kubernetes"])
        | names(groups["examples"])
        | {"jupyterhub", "jupyterlab"}
    )
    missing = wanted - installed
    assert not missing, f"add to images/notebook/requirements.txt: {sorted(missing)}"
    assert re.search(r"^FROM \$\{WORKER_IMAGE\}$", dockerfile("notebook"), re.M), (
        "the notebook image must build on the worker image"
    )


def test_hub_installs_the_hub_extra_and_no_torch() -> None:
    hub = set(pins("hub"))
    missing = names(pyproject()["hub"]) - hub
    assert not missing, f"add to images/hub/requirements.txt: {sorted(missing)}"
    assert "torch" not in hub


def test_alchemist_hub_imports_with_only_the_hub_image_packages() -> None:
    """The hub image installs alchemist without its dependencies; importing
    alchemist.hub.kubernetes (what the chart's jupyterhub_config.py does) must not need them."""
    hub = set(pins("hub"))
    absent = sorted(
        IMPORT_NAMES.get(n, n.replace("-", "_"))
        for reqs in pyproject().values()
        for n in names(reqs)
        if n not in hub
    )
    code = f"""
import importlib.abc, sys
ABSENT = set({absent!r})
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ABSENT:
            raise ImportError(f"{{name}} is not in the hub image")
sys.meta_path.insert(0, Absent())
import alchemist.hub.kubernetes
from traitlets.config import Config
c = Config()
alchemist.hub.kubernetes.configure_kubespawner(c, {{
    "singleuser": {{"namespace": "n", "image": "i:1", "workerImage": "w:1",
                   "serviceAccount": "u", "workerServiceAccount": "w"}},
    "shared": {{"claimName": "s", "mountPath": "/mnt/a"}},
}})
print(len(c.KubeSpawner.profile_list))
"""
    assert "torch" in absent and "numpy" in absent
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "4"


def final_stage(text: str) -> str:
    return re.split(r"^FROM ", text, flags=re.M)[-1]


@pytest.mark.parametrize("image", NAMES)
def test_image_installs_its_requirements_and_runs_as_non_root(image: str) -> None:
    text = dockerfile(image)
    copied = re.search(rf"^COPY requirements\.lock images/{image}/requirements\.txt (\S+)/$", text, re.M)
    assert copied, f"images/{image}/Dockerfile does not COPY the lock and its requirements.txt"
    folder = re.escape(copied[1])
    assert re.search(
        rf"pip install [^\n]*\n?\s*-r {folder}/requirements\.txt -c {folder}/requirements\.lock", text
    ), f"images/{image} must install its requirements with the lock's pins (-c)"
    users = re.findall(r"^USER (\S+)$", final_stage(text), re.M)
    assert users, f"images/{image}/Dockerfile sets no USER in its final stage"
    uid = users[-1].split(":")[0]
    assert uid not in ("0", "root"), f"images/{image} runs as root"
    assert uid.isdigit(), "use a numeric uid so Kubernetes can check runAsNonRoot"


def test_worker_builds_horovod_with_nccl_and_the_cxx17_fix() -> None:
    text = dockerfile("worker")
    assert "horovod==0.28.1" in text
    # The fix of ENVIRONMENT.md, applied to both CMake files, and checked.
    sed = "sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/'"
    assert sed in text
    window = text[text.index(sed) : text.index(sed) + 300]
    for cmake in ["horovod-0.28.1/CMakeLists.txt", "horovod-0.28.1/horovod/torch/CMakeLists.txt"]:
        assert cmake in window, f"the C++17 fix is not applied to {cmake}"
    assert "HOROVOD_GPU_OPERATIONS=NCCL" in text
    assert "HOROVOD_WITH_PYTORCH=1" in text
    assert "--no-build-isolation" in text
    # Built against the pinned torch, whose build requirements are pinned too.
    for name in ["torch", "cloudpickle", "psutil", "pyyaml", "packaging", "wheel"]:
        assert name in pins("worker")
    assert re.search(r"grep -q '\\\[X\\\] NCCL'", text), "the image must check NCCL is built"


def hadolint() -> str | None:
    local = REPO / ".venv" / "bin" / "hadolint"
    return str(local) if local.is_file() else shutil.which("hadolint")


@pytest.mark.parametrize("image", NAMES)
def test_dockerfile_passes_hadolint(image: str) -> None:
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed: run `bash scripts/setup.d/30-helm.sh`")
    proc = subprocess.run(
        [
            binary,
            "--no-color",
            "--config",
            str(IMAGES / ".hadolint.yaml"),
            str(IMAGES / image / "Dockerfile"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def copy_sources(text: str) -> list[str]:
    """Build-context paths the Dockerfile COPYs (not ``COPY --from=<stage>``)."""
    sources: list[str] = []
    for line in re.findall(r"^COPY (.+)$", text, re.M):
        parts = [p for p in line.split() if not p.startswith("--chown")]
        if parts[0].startswith("--from"):
            continue
        sources += parts[:-1]
    return sources


@pytest.mark.parametrize("image", NAMES)
def test_build_context_holds_what_the_dockerfile_copies(image: str) -> None:
    """Every COPY source exists in the repository and is let through by the image's
    ``Dockerfile.dockerignore`` (which keeps .venv and node_modules out of the context)."""
    ignore = (IMAGES / image / "Dockerfile.dockerignore").read_text().splitlines()
    allowed = [line[1:].rstrip("/") for line in ignore if line.startswith("!")]
    assert "*" in ignore, "the ignore file must start from nothing (*) and allow paths"
    for source in copy_sources(dockerfile(image)):
        path = source.rstrip("/")
        assert (REPO / path).exists(), f"images/{image}/Dockerfile copies missing {source}"
        assert any(path == a or path.startswith(a + "/") for a in allowed), (
            f"{source} is excluded by images/{image}/Dockerfile.dockerignore"
        )
