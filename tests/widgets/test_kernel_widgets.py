"""The monitor's buttons answer while its cell runs, in a real Jupyter kernel.

A ``%%alchemist_distributed`` cell follows its job until it ends; a user who clicks the
monitor's TensorBoard or Cancel button meanwhile must not have to wait for the cell.
These tests drive a real ipykernel over the Jupyter messaging protocol and click the
buttons exactly as JupyterLab does: a ``comm_msg`` on the shell channel carrying the
ipywidgets ``{"method": "custom", "content": {"event": "click"}}`` message to the
button's model (the real browser test is tests/metrics/test_monitor_browser.py).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import alchemist
from alchemist.job.spec import JobState
from alchemist.tensorboard import stop_tensorboard
from tests.conftest import processes_under

LONG_CELL = """%%alchemist_distributed -n 2 --name {name}
import time, alchemist
for step in range(100000):
    alchemist.log(step, loss=1.0 / (step + 1))
    if step == 2:
        print("logging", flush=True)
    time.sleep(0.1)
"""


class Kernel:
    """A real kernel with Alchemist loaded, and what its cells published."""

    def __init__(self) -> None:
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(kernel_name="python3")
        self.kc.execute_interactive("%load_ext alchemist", timeout=60)
        self.models: dict[str, dict[str, Any]] = {}  # comm id -> widget state
        self.updates: list[tuple[str, dict[str, Any]]] = []
        self.messages: list[dict[str, Any]] = []

    def pump(self, timeout: float = 0.2) -> dict[str, Any] | None:
        """Read one iopub message (None when none came) and record widget traffic."""
        try:
            msg = self.kc.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            return None
        self.messages.append(msg)
        content = msg["content"]
        if msg["msg_type"] == "comm_open":
            self.models[content["comm_id"]] = dict(content["data"].get("state", {}))
        elif msg["msg_type"] == "comm_msg" and content["data"].get("method") == "update":
            state = content["data"].get("state", {})
            self.models.setdefault(content["comm_id"], {}).update(state)
            self.updates.append((content["comm_id"], state))
        return msg

    def wait(self, what: str, check: Any, timeout: float = 120) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = check()
            if found:
                return found
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            self.pump()

    def button(self, description: str) -> str:
        """The comm id of the monitor's button with this label."""
        return str(
            self.wait(
                f"the {description} button",
                lambda: next(
                    (
                        cid
                        for cid, st in self.models.items()
                        if st.get("_model_name") == "ButtonModel"
                        and st.get("description") == description
                    ),
                    None,
                ),
            )
        )

    def click(self, comm_id: str) -> None:
        """What JupyterLab sends when the button is clicked."""
        data = {"method": "custom", "content": {"event": "click"}}
        msg = self.kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        self.kc.shell_channel.send(msg)

    def cell_done(self, msg_id: str) -> bool:
        return any(
            m["parent_header"].get("msg_id") == msg_id
            and m["msg_type"] == "status"
            and m["content"]["execution_state"] == "idle"
            for m in self.messages
        )

    def close(self) -> None:
        self.km.shutdown_kernel(now=True)
        self.kc.stop_channels()


@pytest.fixture
def kernel(alchemist_home: Path) -> Iterator[Kernel]:
    k = Kernel()
    try:
        yield k
    finally:
        k.close()


def _started(name: str) -> Any:
    jobs = [j for j in alchemist.jobs() if j.name == name]
    return jobs[0] if jobs and jobs[0].logs(rank=0).count("logging") else None


def test_cancel_button_stops_the_job_while_its_cell_runs(kernel: Kernel) -> None:
    msg_id = kernel.kc.execute(LONG_CELL.format(name="click-cancel"))
    cancel = kernel.button("Cancel")
    job = kernel.wait("the job to log", lambda: _started("click-cancel"))
    assert not kernel.cell_done(msg_id)

    kernel.click(cancel)
    # the click is handled while the cell runs: the job ends, and so does the cell
    kernel.wait("the cell to end", lambda: kernel.cell_done(msg_id), timeout=60)
    assert job.status().state == JobState.CANCELLED
    assert _all_exited(job), "processes of the cancelled job still run after 30 s"
    assert kernel.models[cancel].get("disabled") is True  # a finished job has no Cancel
    states = [st["value"] for _cid, st in kernel.updates if "cancelled" in str(st.get("value", ""))]
    assert states, "the monitor never showed the cancelled state"
    # the cell ended normally (no traceback for a cancel the user asked for)
    reply = kernel.kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = kernel.kc.get_shell_msg(timeout=30)
    assert reply["content"]["status"] == "ok"


def test_tensorboard_button_answers_while_the_cell_runs(kernel: Kernel) -> None:
    msg_id = kernel.kc.execute(LONG_CELL.format(name="click-tb"))
    tb = kernel.button("TensorBoard")
    job = kernel.wait("the job to log", lambda: _started("click-tb"))
    try:
        kernel.click(tb)
        link = kernel.wait(
            "the TensorBoard link",
            lambda: next(
                (st["value"] for _c, st in kernel.updates if "TensorBoard" in str(st.get("value"))),
                None,
            ),
            timeout=90,
        )
        assert f'href="/alchemist/tensorboard/{job.id}/"' in link
        assert not kernel.cell_done(msg_id), "the link came only after the cell"
        assert job.status().state == JobState.RUNNING
    finally:
        job.cancel()
        stop_tensorboard(job)
    kernel.wait("the cell to end", lambda: kernel.cell_done(msg_id), timeout=60)
    assert _all_exited(job), "processes of the cancelled job still run after 30 s"


def _all_exited(job: Any, timeout: float = 30) -> bool:
    """Whether every process of ``job`` has exited within ``timeout`` seconds.

    The state turns cancelled when the workers are stopped; rank 0's TensorBoard writer
    may still be converting its last events for a moment after that.
    """
    deadline = time.monotonic() + timeout
    while processes_under(job.job_dir.root):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
