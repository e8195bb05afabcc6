"""Run a real 2-rank job through the kubernetes backend with its pods inside the worker
image, then print the job's end as JSON. tests/images/test_images_run.py runs this.

Run as ``unshare --mount`` with the test's folder bound on /mnt, so that this process
(playing the notebook pod) sees the shared volume at the chart's ``shared.mountPath``
(/mnt/alchemist), the path every pod command and env of the job names, with nothing
changed on the host. The pods are the stand-in kubelet's (tests/backends/kubernetes/k8s_standin),
but each runs its container's command inside the image: its own root file system, as
the pod security context's uid and gid, the volume mounted where the chart mounts it.

    python worker_job.py BUILDER IMAGE HOST_VOLUME
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support.builders import VALUES, Image  # noqa: E402
from tests.support.k8s_standin import ProcessKubelet, pod_process, standin_backend  # noqa: E402

CELL = """
import os, sys
import torch, torch.distributed as dist
import alchemist
ctx = alchemist.context()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
model, optimizer = alchemist.distribute(model, torch.optim.SGD(model.parameters(), lr=0.1))
x = torch.randn(64, 4)
y = x.sum(1, keepdim=True)
for step in range(30):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    alchemist.log(step, loss=loss.item())
t = torch.tensor([float(ctx.rank + 1)])
dist.all_reduce(t)
print(f"rank={ctx.rank} world={ctx.world_size} sum={t.item():g} uid={os.getuid()}"
      f" gid={os.getgid()} python={sys.executable} cwd={os.getcwd()}", flush=True)
core = getattr(model, "module", model)  # DDP wraps it
weights = {k: v.detach().clone() for k, v in core.state_dict().items()}
"""


def main(builder: str, tag: str, host_volume: str) -> None:
    mount = VALUES["shared"]["mountPath"]
    uid, gid = int(VALUES["singleuser"]["uid"]), int(VALUES["singleuser"]["fsGid"])
    image = Image(builder, tag)

    class ImageKubelet(ProcessKubelet):
        """Runs each pod's container command inside the worker image."""

        def command(
            self, pod: dict[str, Any], master_port: int
        ) -> tuple[list[str], dict[str, str], str | None]:
            argv, env, cwd = pod_process(pod, master_port=master_port, local=False)
            security = pod["spec"]["securityContext"]
            # fsGroup: the kubelet makes the volume the pod's group's; the folder the
            # "notebook" (this root process) made is handed to the pod's uid, as the
            # notebook pod (same uid) would have made it.
            subprocess.run(["chown", "-R", f"{uid}:{gid}", host_volume], check=True)
            # The shared volume: the pod's volume of the claim, where the container mounts it.
            claim = next(v["name"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v)
            mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
            inside = image.argv(
                argv,
                user=f"{security['runAsUser']}:{security['runAsGroup']}",
                volumes={host_volume: mounts[claim]},
                env=env,
                workdir=cwd,
            )
            return inside, dict(os.environ), None

    from alchemist.backends.api import JobRequest
    from alchemist.bundle import build_bundle, write_bundle
    from alchemist.job.config import jobs_root
    from alchemist.job.jobdir import JobDir, atomic_write_json
    from alchemist.job.spec import JobSpec

    os.environ["ALCHEMIST_HOME"] = mount
    try:
        with standin_backend(
            Path(mount),
            kubelet_class=ImageKubelet,
            image=tag,
            mount_path=mount,
            run_as_user=uid,
            run_as_group=gid,
        ) as (backend, _kubelet, _server):
            spec = JobSpec(name="in-image", workers=2, backend="kubernetes", outputs=["weights"])
            job_dir = JobDir(jobs_root() / "jimage1").create()
            atomic_write_json(job_dir.spec, spec.to_dict())
            write_bundle(
                build_bundle(CELL, {}, entry="cell", max_value_bytes=1 << 20), job_dir.bundle
            )
            req = JobRequest("jimage1", "alice", spec, job_dir)
            backend.submit(req)
            deadline = time.monotonic() + 600
            while not backend.status(req).state.is_terminal and time.monotonic() < deadline:
                time.sleep(1)
            status = backend.status(req)
            print(
                json.dumps(
                    {
                        "state": status.state.value,
                        "reason": status.reason,
                        "job_dir": str(job_dir.root.relative_to(mount)),
                        "mount": mount,
                        "uid": uid,
                        "gid": gid,
                    }
                )
            )
    finally:
        image.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
