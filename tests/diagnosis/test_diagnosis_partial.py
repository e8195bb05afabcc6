"""Partial reports while the ranks answer, on a real job whose rank 1 never answers.

Real parts: a 2-rank job on the local backend (``alchemist.client.submit``: torchrun,
gloo) whose rank 1 stops itself with ``SIGSTOP`` before the ``all_reduce`` rank 0 waits
in. A stopped process runs no signal handler and no thread until it is continued, so
rank 1 gives no stacks by signal nor by request file: the report waits its 3 s for it,
calling back with a partial report as rank 0 answers. The job is cancelled at the end
(a stopped rank is continued after its SIGTERM).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from alchemist import client
from alchemist.diagnosis import report
from tests.support.diagnose import STOPPED, line_of, stopped_job


def test_partial_reports_name_the_rank_still_awaited_and_the_final_one_says_it_was_silent(
    submit: Callable[..., client.Job],
) -> None:
    job = stopped_job(submit)
    partials: list[dict[str, Any]] = []
    reduce_line = line_of(STOPPED, "all_reduce")
    final: dict[str, Any] = {}
    for _ in range(4):  # rank 0 may be a moment away from its all_reduce
        partials.clear()
        final = report.diagnose_job(job, on_partial=partials.append)
        if final["classification"] == "missing_rank":
            break
    assert final["headline"] == (
        "rank 1 is stopped (SIGSTOP, or a debugger; SIGCONT resumes it) and has not reached"
        f" all_reduce; rank 0 waits in all_reduce from the cell (line {reduce_line})"
    ), final["headline"]

    # First the ranks are asked, then rank 0 answers while rank 1 is awaited.
    assert partials[0]["headline"] == "asking ranks 0–1 for stacks (up to 3 s)"
    assert partials[0]["waiting_for"] == [0, 1] and partials[0]["answered"] == 0
    waiting = [p for p in partials if p["waiting_for"] == [1]]
    assert waiting, [p["headline"] for p in partials]
    shown = waiting[-1]
    assert shown["headline"] == "rank 0 answered; waiting for rank 1 (up to 3 s)"
    assert shown["collecting"] and shown["classification"] == "collecting"
    assert shown["ranks"][0]["answered"] and not shown["ranks"][1]["answered"]
    assert "in all_reduce from the cell" in shown["ranks"][0]["line"]
    assert not any(p["waiting_for"] == [] for p in partials), "rank 1 never answered"

    # The final report: rank 1 did not answer, and why.
    assert not final["collecting"] and final["waiting_for"] == []
    assert final["partial"] and final["answered"] == 1
    assert not final["ranks"][1]["answered"] and final["ranks"][1]["liveness"] == "running"
    assert final["ranks"][1]["line"] == "rank 1  running  no stacks"
    assert (
        "rank 1 did not answer within 3 s: its process is stopped (SIGSTOP, or a debugger;"
        " SIGCONT resumes it)"
    ) in final["notes"]
    assert final["elapsed_s"] >= 3.0  # it waited the whole timeout for rank 1
