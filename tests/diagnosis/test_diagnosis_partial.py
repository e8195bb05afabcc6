"""Partial reports while the ranks answer, on a real job whose rank 1 never answers.

Real parts: a 2-rank job on the local backend (``alchemist.client.submit``: torchrun,
gloo) whose rank 1 stops itself with ``SIGSTOP`` before the ``all_reduce`` rank 0 waits
in. A stopped process runs no signal handler and no thread until it is continued, so
rank 1 gives no stacks by signal nor by request file: the report does not ask it (its
process state says it is stopped) and so waits for no one once rank 0 has answered,
calling back with a partial report meanwhile. The job is cancelled at the end (a
stopped rank is continued after its SIGTERM).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from alchemist import client
from alchemist.diagnosis import report
from tests.support.diagnose import STOPPED, line_of, stopped_job


def test_a_stopped_rank_is_not_waited_for_and_the_report_says_why(
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

    # Rank 0 is asked; the stopped rank 1 is not waited for.
    assert partials[0]["headline"] == "asking rank 0 for stacks (up to 3 s)"
    assert partials[0]["waiting_for"] == [0] and partials[0]["answered"] == 0
    assert not any(1 in p["waiting_for"] for p in partials)

    # The final report: rank 1 gave no stacks, and why; nobody waited the timeout out.
    assert not final["collecting"] and final["waiting_for"] == []
    assert final["partial"] and final["answered"] == 1
    assert not final["ranks"][1]["answered"] and final["ranks"][1]["liveness"] == "running"
    assert final["ranks"][1]["line"] == "rank 1  running  no stacks"
    assert "in all_reduce from the cell" in final["ranks"][0]["line"]
    assert (
        "rank 1 is stopped (SIGSTOP, or a debugger; SIGCONT resumes it): not asked for stacks,"
        " a stopped process answers nothing"
    ) in final["notes"]
    assert final["elapsed_s"] < 3.0  # it did not wait the timeout for rank 1
