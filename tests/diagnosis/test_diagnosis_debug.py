"""``--debug``, the flight recorder's settings and the request responder, one part at a time.

Real parts: a real 2-rank torchrun job on gloo run with ``debug=True`` (torch's own
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` collective check), the real option table and parsers,
a real responder thread in this process answering a real request file. No stand-ins.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from alchemist import cli, client
from alchemist.backends.launch import worker_env
from alchemist.client import make_spec
from alchemist.diagnosis import collect, stacks
from alchemist.errors import SpecError
from alchemist.job.jobdir import JobDir
from alchemist.job.options import check_body_types, describe_options
from alchemist.job.spec import JobState
from alchemist.runtime import hooks, recorder
from tests.support.diagnose import logged, wait_for

DESYNC = """
import torch, torch.distributed as dist
rank = dist.get_rank()
print(f"rank {rank} ready", flush=True)
dist.all_reduce(torch.ones(4 if rank == 0 else 5))
"""


def test_debug_fails_a_desync_at_once_naming_both_ranks(
    submit: Callable[..., client.Job],
) -> None:
    """Rank 0 reduces a tensor of shape [4], rank 1 one of shape [5]: under --debug the
    job fails within seconds of the ranks reaching the collective, and the failure
    reason shows both ranks' collective fingerprints."""
    job = submit(DESYNC, debug=True)
    wait_for(lambda: logged(job, 0, "rank 0 ready") or job.status().state.is_terminal, 120, "ready")
    t0 = time.monotonic()
    st = job.wait(timeout=60)
    assert time.monotonic() - t0 < 15.0
    assert st.state == JobState.FAILED
    reason = st.reason or ""
    assert "Detected mismatch between collectives on ranks" in reason, reason
    assert "Rank 0" in reason and "Rank 1" in reason, reason
    assert "TensorShape=[4]" in reason and "TensorShape=[5]" in reason, reason
    for rank in (0, 1):
        log = job.job_dir.rank_log(rank).read_text(errors="replace")
        assert "Detected mismatch between collectives" in log, rank


def test_debug_reaches_the_worker_environment(tmp_path: Path) -> None:
    job_dir = JobDir(tmp_path)
    assert "TORCH_DISTRIBUTED_DEBUG" not in worker_env("j1", job_dir, make_spec())
    debug = worker_env("j1", job_dir, make_spec(debug=True))
    assert debug["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    # the user's env wins
    own = make_spec(debug=True, env={"TORCH_DISTRIBUTED_DEBUG": "INFO"})
    assert worker_env("j1", job_dir, own)["TORCH_DISTRIBUTED_DEBUG"] == "INFO"


def test_ranks_get_a_modest_recorder_unless_the_user_set_one() -> None:
    env: dict[str, str] = {}
    recorder.enable(env)
    assert env == {"TORCH_FR_BUFFER_SIZE": str(recorder.BUFFER_ENTRIES)}
    for var in recorder.BUFFER_VARS:  # a user's --env value is kept, 0 turns it off
        own = {var: "0"}
        recorder.enable(own)
        assert own == {var: "0"}


def test_debug_from_every_entry_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    assert cli.main(["submit", str(script), "--debug", "--dry-run"]) == 0
    assert " TORCH_DISTRIBUTED_DEBUG=DETAIL " in capsys.readouterr().out
    assert cli.main(["submit", str(script), "--dry-run"]) == 0
    assert "TORCH_DISTRIBUTED_DEBUG" not in capsys.readouterr().out
    assert check_body_types({"debug": True}) is None
    assert check_body_types({"debug": "true"}) is None  # the panel's choice, as text
    assert check_body_types({"debug": 1}) == ("debug", "debug must be true or false, got 1")
    (row,) = (o for o in describe_options("rest") if o["name"] == "debug")
    assert (row["type"], row["default"], row["choices"]) == ("bool", False, ["true", "false"])
    assert make_spec(debug="true").debug is True and make_spec(debug="false").debug is False
    with pytest.raises(SpecError, match="debug must be true or false, got 'yes'"):
        make_spec(debug="yes")


def test_the_recorder_summary_reads_torch_s_entries() -> None:
    """The shape of torch 2.13's ``_dump_fr_trace_json`` (as gloo ranks wrote it here)."""

    def entry(seq: int, op: str, pg: int = 0) -> dict[str, object]:
        return {
            "collective_seq_id": seq,
            "profiling_name": f"gloo:{op}",
            "state": "scheduled",
            "pg_id": pg,
            "input_sizes": [[3]],
            "is_p2p": False,
        }

    dump = {"entries": [entry(1, "all_reduce"), entry(2, "broadcast"), entry(7, "barrier", 1)]}
    snap = recorder.summarize(dump)
    assert snap is not None
    assert (snap["seq"], snap["op"], snap["sizes"]) == (2, "broadcast", [[3]])  # default group
    assert recorder.label(snap) == "broadcast #2"
    assert recorder.parse_block("stacks\n" + recorder.format_snapshot(snap)) == snap
    assert recorder.summarize({"entries": []}) is None and recorder.summarize(None) is None
    assert recorder.label(None) is None


def test_the_responder_answers_a_request_with_every_thread(tmp_path: Path) -> None:
    """A responder thread in this process answers a request file within a second or so,
    with every thread's stack (the watchdog's writer) and the recorder line."""
    job_dir = JobDir(tmp_path)
    stop = threading.Event()
    waiter = threading.Thread(target=stop.wait, name="waiter", daemon=True)
    waiter.start()
    responder = hooks._Responder(hooks.requests_dir(job_dir), rank=3, poll=0.05)
    try:
        answers = collect.request_answers(job_dir, [3], timeout=5.0)
    finally:
        responder.stop()
        stop.set()
    text = answers[3]
    threads = stacks.parse_dump(text)
    assert threads[0].id == threading.main_thread().ident  # the main thread first
    assert any(f.function == "wait" for t in threads for f in t.frames)  # the waiter
    assert text.splitlines()[-1].startswith("Flight recorder: ")
    assert list(hooks.requests_dir(job_dir).iterdir()) == []  # nothing left behind
