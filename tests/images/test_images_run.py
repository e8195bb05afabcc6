"""The three images, built from this repository's files (conftest: scripts/build-images.sh,
CPU variant), run here.

- worker: a real 2-rank job of the kubernetes backend, its pods' commands run inside
  the image (worker_job.py) as the pod security context's uid, the job folder mounted
  where the chart mounts the shared volume; the job trains and its outputs come back.
  The API server and kubelet are the stand-ins of tests/backends/kubernetes (no cluster here);
  the processes, torch.distributed's rendezvous and the image are real.
- notebook: JupyterLab in the image lists the side panel and the server extension,
  enabled, for the notebook's uid.
- hub: the hub image's JupyterHub loads the chart's jupyterhub_config.py with the
  hub-config.yaml real Helm renders, and carries the proxy the chart runs from it.
"""

from __future__ import annotations

import base64
import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import cloudpickle
import pytest

from tests.support.builders import REPO, VALUES, Image, chart_tag

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

UID, GID = int(VALUES["singleuser"]["uid"]), int(VALUES["singleuser"]["fsGid"])


def test_worker_image_trains_a_two_rank_job_as_the_pods_uid(images: str, volume: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1), to see the volume at the chart's mount path")
    mount = PurePosixPath(VALUES["shared"]["mountPath"])
    host = volume / mount.name
    proc = subprocess.run(
        [
            "unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", str(volume), str(mount.parent),
            sys.executable, str(REPO / "tests" / "images" / "worker_job.py"),
            images, chart_tag("worker"), str(host),
        ],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    end = json.loads(proc.stdout.strip().splitlines()[-1])
    job = host / end["job_dir"]
    logs = {r: (job / "logs" / f"rank-{r}.log").read_text(errors="replace") for r in (0, 1)}
    assert end["state"] == "succeeded", (end, logs)

    # Both ranks ran in the image (its venv), as the pod's uid and gid, in the job's
    # folder at the chart's mount path, and met in one process group.
    for rank, text in logs.items():
        assert (
            f"rank={rank} world=2 sum=3 uid={UID} gid={GID} python=/opt/venv/bin/python"
            f" cwd={mount / end['job_dir']}"
        ) in text, text
    # The curves came back: every step's loss from each rank, and training lowered it.
    for rank in (0, 1):
        events = [
            json.loads(line)
            for line in (job / "metrics" / f"rank-{rank}.jsonl").read_text().splitlines()
        ]
        losses = [e["values"]["loss"] for e in events if "loss" in e.get("values", {})]
        assert len(losses) == 30, events[:3]
        assert losses[-1] < losses[0] / 2
    # And rank 0's output, written by the pod's uid, loads here.
    outputs = job / "outputs.pkl"
    assert outputs.stat().st_uid == UID
    weights = cloudpickle.loads(outputs.read_bytes())["weights"]
    assert tuple(weights["weight"].shape) == (1, 4)


def test_notebook_image_shows_the_panel_and_the_server_extension(images: str) -> None:
    image = Image(images, chart_tag("notebook"))
    try:
        lab = image.run(["jupyter", "labextension", "list"], user=f"{UID}:{GID}")
        server = image.run(["jupyter", "server", "extension", "list"], user=f"{UID}:{GID}")
        whoami = image.run(["id", "-u"])
    finally:
        image.close()
    assert lab.returncode == 0, lab.stderr
    listed = lab.stdout + lab.stderr  # jupyter writes the list to stderr
    assert "alchemist-jupyterlab" in listed and "enabled" in listed, listed
    panel = next(line for line in listed.splitlines() if "alchemist-jupyterlab" in line)
    assert "enabled" in panel and "OK" in panel, panel
    assert server.returncode == 0, server.stderr
    served = re.sub(r"\x1b\[[0-9;]*m", "", server.stdout + server.stderr)  # no colours
    assert re.search(r"^\s*alchemist\.server enabled$", served, re.M), served
    assert re.search(r"^\s*alchemist\.server\s.*OK$", served, re.M), served  # validated
    assert whoami.stdout.strip() == str(UID), "the notebook image's user is the chart's uid"


def _rendered_hub_config(folder: Path) -> dict[str, str]:
    """Write the hub ConfigMap's files, as real Helm renders them, into ``folder``, and
    return the hub's environment from the rendered Secret."""
    from tests.support.chart import find_helm, render

    helm = find_helm()
    if helm is None:
        pytest.skip("Helm is not installed: run `bash scripts/setup.d/30-helm.sh`")
    objects = render(helm)
    config = next(
        o for o in objects if o["kind"] == "ConfigMap" and "jupyterhub_config.py" in o["data"]
    )
    for name, text in config["data"].items():
        (folder / name).write_text(text)
    secret = next(o for o in objects if o["kind"] == "Secret" and "proxy-token" in o.get("data", {}))
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    return {
        "CONFIGPROXY_AUTH_TOKEN": data["proxy-token"],
        "ALCHEMIST_HUB_COOKIE_SECRET": data["cookie-secret"],
    }


def test_hub_image_loads_the_charts_jupyterhub_config(images: str, tmp_path: Path) -> None:
    env = _rendered_hub_config(tmp_path)
    os.chmod(tmp_path, 0o755)
    load = (
        "from jupyterhub.app import JupyterHub\n"
        "app = JupyterHub()\n"
        "app.load_config_file('/usr/local/etc/alchemist/jupyterhub_config.py')\n"
        "c = app.config\n"
        "import json\n"
        "from traitlets.utils.importstring import import_item\n"
        "from kubespawner import KubeSpawner\n"
        "from nativeauthenticator import NativeAuthenticator\n"
        "def load(name):\n"
        "    return import_item(name) if isinstance(name, str) else name\n"
        "print(json.dumps({'spawner': str(c.JupyterHub.spawner_class),"
        " 'kubespawner': issubclass(load(c.JupyterHub.spawner_class), KubeSpawner),"
        " 'authenticator': str(c.JupyterHub.authenticator_class),"
        " 'native': issubclass(load(c.JupyterHub.authenticator_class), NativeAuthenticator),"
        " 'profiles': len(c.KubeSpawner.profile_list), 'uid': c.KubeSpawner.uid,"
        " 'namespace': c.KubeSpawner.namespace}))\n"
    )
    image = Image(images, chart_tag("hub"))
    try:
        loaded = image.run(
            ["python", "-c", load],
            user=f"{UID}:{UID}",
            volumes={str(tmp_path): "/usr/local/etc/alchemist"},
            env=env,
            workdir="/srv/jupyterhub",
        )
        proxy = image.run(["configurable-http-proxy", "--version"])
        hub = image.run(["jupyterhub", "--version"])
    finally:
        image.close()
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr
    got = json.loads(loaded.stdout.strip().splitlines()[-1])
    # The chart's classes, imported from the image: KubeSpawner and Alchemist's
    # NativeAuthenticator (which creates the admin accounts).
    assert got["kubespawner"] and got["native"], got
    assert got["authenticator"].startswith("alchemist.hub"), got
    assert got["profiles"] >= 1 and got["uid"] == UID, got
    assert proxy.returncode == 0 and proxy.stdout.strip(), proxy.stderr
    assert hub.returncode == 0 and hub.stdout.strip().startswith("6."), hub.stdout + hub.stderr
