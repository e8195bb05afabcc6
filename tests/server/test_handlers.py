"""The REST API behind the JupyterLab panel, against a real Jupyter server.

Routes are called over HTTP with pytest-jupyter's ``jp_fetch`` (token-authenticated).
Finished jobs are recorded in the real job store with their files on disk; two tests
run real jobs on the local backend (torchrun), one to success and one to cancellation.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from alchemist.store import get_store
from tests.support.jobs import USER, Api, make_record, write_events

TRAIN_NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# a notebook job"]},
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": ["import alchemist\n", "steps = 3\n"],
        },
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": [
                "ctx = alchemist.context()\n",
                "for step in range(steps):\n",
                "    alchemist.log(step, loss=1.0 / (step + 1))\n",
                "print(f'cells ran in order on rank {ctx.rank} of {ctx.world_size}')\n",
            ],
        },
    ],
    "metadata": {},
    "nbformat": 4,
    "nbformat_minor": 5,
}


async def wait_for_state(api: Api, job_id: str, states: set[str], timeout: float) -> dict[str, Any]:
    """Poll the job until it is in one of ``states``; fail with its last view after ``timeout``."""
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        code, job = await api("GET", "jobs", job_id)
        assert code == 200, job
        if job["state"] in states:
            return job
        await asyncio.sleep(0.5)
    pytest.fail(f"job {job_id} did not reach {states} in {timeout}s: {job}")


# -- listing and reading -----------------------------------------------------------------------


async def test_root_says_version_backends_and_algorithm_options(api: Api) -> None:
    code, body = await api("GET")
    assert code == 200
    assert body["version"]
    assert "local" in body["backends"]
    options = body["algorithm_options"]
    assert list(options) == ["sync", "async", "bmuf", "easgd", "horovod"]
    bmuf = {o["name"]: o for o in options["bmuf"]}
    assert bmuf["block_size"]["default"] == "16" and bmuf["block_size"]["help"]
    assert bmuf["block_momentum"]["default"] == "1 - 1/N"


async def test_root_lists_the_job_options_algorithms_and_states_the_form_needs(api: Api) -> None:
    """The panel builds its form from this: exactly the table's REST options."""
    from alchemist.job.options import options_for
    from alchemist.job.spec import ALGORITHMS, JobState

    code, body = await api("GET")
    assert code == 200
    listed = {o["name"]: o for o in body["job_options"]}
    assert list(listed) == [opt.name for opt in options_for("rest")]
    for opt in options_for("rest"):
        row = listed[opt.name]
        assert (row["type"], row["default"], row["help"]) == (opt.type, opt.default, opt.help)
        assert row["flags"] == list(opt.flags) and row["label"]
    for name in ("max_restarts", "timeout", "global_batch", "image", "cpu", "memory"):
        assert name in listed
    assert body["algorithms"] == list(ALGORITHMS)
    assert body["states"] == [s.value for s in JobState]


async def test_list_is_the_users_jobs_newest_first_filtered_by_state(api: Api) -> None:
    now = time.time()
    old, _ = make_record(name="old", created=now - 100)
    new, new_dir = make_record(name="new", created=now - 10, state="failed")
    make_record(name="theirs", owner="bob", created=now)
    write_events(new_dir, [{"rank": 0, "step": 7, "time": now, "values": {"loss": 0.25}}])

    code, body = await api("GET", "jobs")
    assert code == 200
    assert [j["id"] for j in body["jobs"]] == [new.id, old.id]
    assert body["jobs"][0]["owner"] == USER
    assert body["jobs"][0]["latest"]["values"] == {"loss": 0.25}
    assert body["jobs"][1]["latest"] is None

    code, body = await api("GET", "jobs", params={"state": "succeeded"})
    assert [j["id"] for j in body["jobs"]] == [old.id]


async def test_list_pages_through_a_long_history_with_the_next_cursor(api: Api) -> None:
    now = time.time()
    made = [make_record(name=f"j{i}", created=now - 100 + i)[0].id for i in range(7)]
    make_record(name="theirs", owner="bob", created=now)
    seen, before, pages = [], None, 0
    while True:
        code, body = await api(
            "GET", "jobs", params={"limit": "3", **({"before": before} if before else {})}
        )
        assert code == 200, body
        seen += [j["id"] for j in body["jobs"]]
        pages += 1
        before = body["next"]
        if before is None:
            break
    assert seen == made[::-1] and pages == 3  # newest first, no overlap, no gap, not bob's
    code, body = await api("GET", "jobs", params={"before": "the-beginning"})
    assert (code, body["field"]) == (400, "before")
    assert "not a page cursor" in body["message"]


async def test_list_rejects_an_unknown_state_or_argument(api: Api) -> None:
    code, body = await api("GET", "jobs", params={"state": "sleeping"})
    assert (code, body["field"]) == (400, "state")
    assert "choose one of" in body["message"]
    code, body = await api("GET", "jobs", params={"sort": "name"})
    assert (code, body["field"]) == (400, "sort")
    code, body = await api("GET", "jobs", params={"limit": "many"})
    assert (code, body["field"]) == (400, "limit")
    # a bare cache-busting argument, as JupyterLab adds to every GET, is fine
    code, body = await api("GET", "jobs", params={"1796236842493": ""})
    assert code == 200, body


async def test_get_job_and_its_latest_metric(api: Api) -> None:
    record, job_dir = make_record(name="one")
    write_events(
        job_dir,
        [
            {"rank": 0, "step": 1, "time": 1.0, "values": {"loss": 1.0}},
            {"rank": 0, "step": 2, "time": 2.0, "values": {"loss": 0.5}},
            {"rank": 1, "step": 2, "time": 2.0, "values": {"loss": 0.6}},
        ],
    )
    code, job = await api("GET", "jobs", record.id)
    assert code == 200
    assert job["id"] == record.id and job["name"] == "one" and job["state"] == "succeeded"
    assert job["spec"]["workers"] == 2
    # rank 0's newest event stands for the job
    assert job["latest"]["values"] == {"loss": 0.5}


async def test_latest_metric_of_a_job_whose_rank_0_logged_nothing(api: Api) -> None:
    record, job_dir = make_record(name="quiet-rank-0")
    job_dir.rank_metrics(0).touch()  # rank 0 started, logged nothing yet
    write_events(
        job_dir,
        [
            {"rank": 2, "step": 4, "time": 4.0, "values": {"loss": 0.2}},
            {"rank": 1, "step": 3, "time": 3.0, "values": {"loss": 0.3}},
            {"rank": 1, "step": 4, "time": 4.0, "values": {"loss": 0.25}},
        ],
    )
    code, job = await api("GET", "jobs", record.id)
    assert code == 200
    assert job["latest"]["rank"] == 1 and job["latest"]["values"] == {"loss": 0.25}


async def test_a_job_directory_of_an_earlier_version_is_listed_and_read(api: Api) -> None:
    """Earlier versions appended every rank's events to one ``metrics.jsonl``."""
    record, job_dir = make_record(name="old-layout")
    job_dir.shared_metrics().write_text(
        "".join(
            json.dumps({"rank": r, "step": s, "time": float(s), "values": {"loss": s + r / 10}})
            + "\n"
            for s in range(3)
            for r in (0, 1)
        )
    )
    code, job = await api("GET", "jobs", record.id)
    assert job["latest"]["rank"] == 0 and job["latest"]["values"] == {"loss": 2}
    code, body = await api("GET", "jobs", record.id, "metrics")
    assert code == 200 and len(body["events"]) == 6


async def test_unknown_job_is_404_on_every_job_route(api: Api) -> None:
    for method, parts in [
        ("GET", ()),
        ("DELETE", ()),
        ("GET", ("metrics",)),
        ("GET", ("logs",)),
        ("GET", ("dryrun",)),
        ("POST", ("tensorboard",)),
    ]:
        code, body = await api(method, "jobs", "jnosuchjob", *parts)
        assert code == 404, (method, parts, body)
        assert "jnosuchjob" in body["message"]


async def test_another_users_job_is_403_and_left_alone(api: Api) -> None:
    record, _ = make_record(owner="bob", state="running")
    for method, parts in [
        ("GET", ()),
        ("DELETE", ()),
        ("GET", ("metrics",)),
        ("GET", ("logs",)),
        ("GET", ("dryrun",)),
        ("POST", ("tensorboard",)),
    ]:
        code, body = await api(method, "jobs", record.id, *parts)
        assert code == 403, (method, parts, body)
        assert "another user" in body["message"]
    stored = get_store().get(record.id)
    assert stored is not None and stored.state == "running"


async def test_requests_without_a_valid_token_are_refused(api: Api) -> None:
    code, body = await api("GET", "jobs", headers={"Authorization": "token wrong"})
    assert code == 403
    assert "message" in body


# -- metrics and logs ----------------------------------------------------------------------------


async def test_metrics_from_a_cursor(api: Api) -> None:
    record, job_dir = make_record()
    write_events(job_dir, [{"rank": 0, "step": s, "values": {"loss": s}} for s in range(3)])
    code, body = await api("GET", "jobs", record.id, "metrics")
    assert code == 200
    assert [e["step"] for e in body["events"]] == [0, 1, 2]
    assert body["more"] is False
    cursor = body["cursor"]
    assert isinstance(cursor, str) and cursor.startswith("0:")  # opaque; one offset per rank

    # rank 1's file appears after the cursor was made: read from its start
    write_events(job_dir, [{"rank": 1, "step": 3, "values": {"loss": 3}}])
    code, body = await api("GET", "jobs", record.id, "metrics", params={"since": cursor})
    assert [(e["rank"], e["step"]) for e in body["events"]] == [(1, 3)]

    code, body = await api("GET", "jobs", record.id, "metrics", params={"since": body["cursor"]})
    assert body["events"] == []
    code, body = await api("GET", "jobs", record.id, "metrics", params={"since": ""})
    assert len(body["events"]) == 4


async def test_metrics_are_paged_by_bytes(api: Api) -> None:
    record, job_dir = make_record()
    write_events(job_dir, [{"rank": 0, "step": s, "values": {"loss": s}} for s in range(200)])
    steps: list[int] = []
    cursor, pages = "", 0
    while True:
        code, body = await api(
            "GET", "jobs", record.id, "metrics", params={"since": cursor, "max_bytes": 1000}
        )
        assert code == 200
        assert len(json.dumps(body["events"])) < 3000
        steps += [e["step"] for e in body["events"]]
        cursor, pages = body["cursor"], pages + 1
        if not body["more"]:
            break
    assert steps == list(range(200))
    assert pages > 5


async def test_metrics_reject_a_bad_cursor(api: Api) -> None:
    record, _ = make_record()
    code, body = await api("GET", "jobs", record.id, "metrics", params={"since": "-1"})
    assert (code, body["field"]) == (400, "since")
    code, body = await api("GET", "jobs", record.id, "metrics", params={"since": "abc"})
    assert (code, body["field"]) == (400, "since")
    assert "not a metrics cursor" in body["message"]
    code, body = await api("GET", "jobs", record.id, "metrics", params={"since": "0:12,1:x"})
    assert (code, body["field"]) == (400, "since")


@pytest.mark.parametrize(
    "cursor",
    [
        "99999999999999999999999",  # past a signed 64-bit offset
        str(10**400),
        "9" * 5000,  # more digits than int() reads
        "0:99999999999999999999999",
        f"0:12,1:{10**400}",
        f"{'9' * 5000}:5",  # a rank too large to read
    ],
)
async def test_a_huge_metrics_cursor_is_a_400_naming_since(api: Api, cursor: str) -> None:
    record, job_dir = make_record()
    write_events(job_dir, [{"rank": 0, "step": 1, "values": {"loss": 1.0}}])
    code, body = await api("GET", "jobs", record.id, "metrics", params={"since": cursor})
    assert (code, body["field"]) == (400, "since"), body
    assert "cursor" in body["message"] and len(body["message"]) < 300


async def test_a_metrics_cursor_past_the_end_of_a_file_reads_nothing_there(api: Api) -> None:
    """An offset beyond what ext4 can seek to (16 TiB) once gave a 500."""
    record, job_dir = make_record()
    write_events(job_dir, [{"rank": r, "step": 1, "values": {"loss": 1.0}} for r in (0, 1)])
    far = 1 << 62
    code, body = await api("GET", "jobs", record.id, "metrics", params={"since": f"0:{far}"})
    assert code == 200, body
    # rank 0 has nothing after the cursor; rank 1's file is read from its start
    assert [e["rank"] for e in body["events"]] == [1]
    assert body["cursor"].startswith(f"0:{far},1:")


@pytest.mark.parametrize(
    ("since", "words"),
    [
        ("99999999999999999999999", "must be at most 9007199254740991"),
        (str(10**400), "must be at most"),
        ("9" * 5000, "must be at most"),
        ("-" + "9" * 5000, "must be at least 0"),
        ("1e400", "must be an integer"),
    ],
)
async def test_a_huge_log_cursor_is_a_400_naming_since(api: Api, since: str, words: str) -> None:
    record, job_dir = make_record()
    job_dir.rank_log(0).write_text("one\ntwo\n")
    code, body = await api("GET", "jobs", record.id, "logs", params={"since": since})
    assert (code, body["field"]) == (400, "since"), body
    assert words in body["message"] and len(body["message"]) < 300, body


async def test_a_log_cursor_past_the_end_reads_nothing_and_stays(api: Api) -> None:
    """A cursor beyond what ext4 can seek to (16 TiB) once gave a 500."""
    record, job_dir = make_record()
    job_dir.rank_log(0).write_text("one\ntwo\n")
    for since in (100, 1 << 50, (1 << 53) - 1):
        code, body = await api("GET", "jobs", record.id, "logs", params={"since": since})
        assert code == 200, body
        assert (body["lines"], body["cursor"], body["truncated"]) == ([], since, False)
    code, body = await api("GET", "jobs", record.id, "logs", params={"since": 4})
    assert (body["lines"], body["cursor"]) == (["two"], 8)


#: Lines of a metrics file that are not events: each must be skipped, never a 500.
MALFORMED_LINES = [
    '{"rank": 0, "step": 3, "time": 3.0, "values": {"loss"',  # truncated, then a newline
    "not json at all",
    "[1, 2, 3]",
    '{"rank": "zero", "step": 4, "values": {"loss": 1.0}}',
    '{"rank": -1, "step": 4, "values": {"loss": 1.0}}',
    '{"rank": true, "step": 4, "values": {"loss": 1.0}}',
    '{"rank": 0, "step": "four", "values": {"loss": 1.0}}',
    '{"rank": 0, "step": 1e400, "values": {"loss": 1.0}}',
    '{"rank": 0, "step": 4, "values": {"loss": "high"}}',
    '{"rank": 0, "step": 4, "values": {"loss": null}}',
    '{"rank": 0, "step": 4, "values": {"loss": [1]}}',
    '{"rank": 0, "step": 4, "values": [1.0]}',
    '{"rank": 0, "step": 4, "time": "noon", "values": {"loss": 1.0}}',
    '{"rank": 0, "step": 4, "attempt": "second", "values": {"loss": 1.0}}',
    '{"rank": 0, "step": 4, "values": {"total_steps": "many"}}',
    "{" + '"a":[' * 100_000 + "]" * 100_000 + "}",  # nested past the parser's recursion
]


async def test_malformed_metrics_lines_are_skipped_and_counted(api: Api) -> None:
    """The panel's first view of a job (view=summary), its paging (view=events) and
    the list's latest metric read past every line that is not an event."""
    record, job_dir = make_record()
    good = [
        json.dumps({"rank": 0, "step": s, "time": float(s), "values": {"loss": 1.0 / (s + 1)}})
        for s in range(3)
    ]
    lines = [good[0], *MALFORMED_LINES[:8], good[1], *MALFORMED_LINES[8:], good[2]]
    job_dir.metrics_dir.mkdir(parents=True, exist_ok=True)
    job_dir.rank_metrics(0).write_text("\n".join(lines) + "\n")
    (job_dir.metrics_dir / "rank-1.jsonl").write_text(MALFORMED_LINES[6] + "\n")

    code, body = await api("GET", "jobs", record.id, "metrics", params={"view": "summary"})
    assert code == 200, body
    assert body["metrics"] == ["loss"] and body["complete"] is True
    (series,) = body["series"]
    assert (series["rank"], series["steps"], series["count"]) == (0, [0, 1, 2], 3)
    assert body["skipped"] == len(MALFORMED_LINES) + 1
    # the cursor after the summary goes on from the end: nothing is read twice
    code, after = await api("GET", "jobs", record.id, "metrics", params={"since": body["cursor"]})
    assert (code, after["events"], after["skipped"]) == (200, [], 0)

    code, body = await api("GET", "jobs", record.id, "metrics")
    assert code == 200, body
    assert [e["step"] for e in body["events"]] == [0, 1, 2]
    assert body["skipped"] == len(MALFORMED_LINES) + 1

    with open(job_dir.rank_metrics(0), "a") as f:
        f.write(MALFORMED_LINES[9] + "\n")  # the newest line of rank 0 is not an event
    code, job = await api("GET", "jobs", record.id)
    assert code == 200 and job["latest"]["step"] == 2
    code, listing = await api("GET", "jobs")
    assert code == 200 and [j["latest"]["step"] for j in listing["jobs"]] == [2]


async def test_replies_are_strict_json_when_a_metric_is_nan_or_infinite(api: Api) -> None:
    """A NaN loss is a real value (the reporter writes it as NaN); replies hold null,
    which the panel's JSON.parse reads, where they held a bare NaN, which it does not."""
    record, job_dir = make_record()
    job_dir.metrics_dir.mkdir(parents=True, exist_ok=True)
    job_dir.rank_metrics(0).write_text(
        '{"rank": 0, "step": 0, "time": 1.0, "values": {"loss": 1.5}}\n'
        '{"rank": 0, "step": 1, "time": 2.0, "values": {"loss": NaN, "gnorm": Infinity}}\n'
    )
    # the api fixture fails on any NaN or Infinity in a reply
    code, job = await api("GET", "jobs", record.id)
    assert code == 200 and job["latest"]["values"] == {"loss": None, "gnorm": None}
    code, listing = await api("GET", "jobs")
    assert code == 200 and listing["jobs"][0]["latest"]["values"]["loss"] is None
    code, body = await api("GET", "jobs", record.id, "metrics")
    assert code == 200 and body["events"][1]["values"] == {"loss": None, "gnorm": None}
    code, body = await api("GET", "jobs", record.id, "metrics", params={"view": "summary"})
    assert code == 200, body
    loss = next(s for s in body["series"] if s["metric"] == "loss")
    assert loss["values"] == [1.5, None]


async def test_very_long_logs_are_paged_and_bounded(api: Api) -> None:
    record, job_dir = make_record()
    line = "x" * 99  # 100 bytes a line with its newline
    n_lines = 30_000  # a 3 MB log
    job_dir.rank_log(1).write_text("".join(f"{i:08d}{line[8:]}\n" for i in range(n_lines)))

    # the default page is bounded (256 KiB) and says more is waiting
    code, body = await api("GET", "jobs", record.id, "logs", params={"rank": 1})
    assert code == 200
    assert body["truncated"] is True
    assert sum(len(x) + 1 for x in body["lines"]) <= 256 * 1024
    assert body["ranks"] == [1]

    # asking for more than the cap gets the cap (1 MiB), not the whole file
    code, body = await api(
        "GET", "jobs", record.id, "logs", params={"rank": 1, "limit_bytes": 10**9}
    )
    assert sum(len(x) + 1 for x in body["lines"]) <= 1024 * 1024

    # paging from the cursor returns every line exactly once, in order
    seen: list[int] = []
    cursor = 0
    while True:
        code, body = await api(
            "GET", "jobs", record.id, "logs", params={"rank": 1, "since": cursor}
        )
        seen += [int(x[:8]) for x in body["lines"]]
        cursor = body["cursor"]
        if not body["truncated"]:
            break
    assert seen == list(range(n_lines))


async def test_logs_of_a_rank_that_wrote_nothing_are_empty(api: Api) -> None:
    record, _ = make_record()
    code, body = await api("GET", "jobs", record.id, "logs", params={"rank": 3, "since": 0})
    assert code == 200
    assert body["lines"] == [] and body["cursor"] == 0
    code, body = await api("GET", "jobs", record.id, "logs", params={"rank": "one"})
    assert (code, body["field"]) == (400, "rank")


async def test_dryrun_of_a_recorded_job_is_the_backend_request(api: Api) -> None:
    record, _ = make_record(workers=2)
    code, body = await api("GET", "jobs", record.id, "dryrun")
    assert code == 200
    assert body["backend"] == "local"
    assert body["job_id"] == record.id
    assert "alchemist" in body["text"]
    assert body["request"]


# -- submission: input checks --------------------------------------------------------------


async def test_submit_rejects_bad_json(api: Api) -> None:
    for route in (("jobs",), ("jobs", "dryrun")):
        code, body = await api("POST", *route, raw_body="{not json")
        assert code == 400
        assert "not valid JSON" in body["message"]
        code, body = await api("POST", *route, raw_body="[1, 2]")
        assert code == 400
        assert "JSON object" in body["message"]


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"colour": "red"}, "colour", "unknown field"),
        ({"workers": "2"}, "workers", "must be an integer"),
        ({"workers": True}, "workers", "must be an integer"),
        ({"env": {"A": 1}}, "env", "must be a string"),
        ({"env": ["A=1"]}, "env", "must be an object"),
        ({"path": ""}, "path", "path is required"),
        ({"path": "../outside.py"}, "path", "outside the server's root"),
        ({"path": "missing.py"}, "path", "does not exist"),
        ({"path": "data.txt"}, "path", "not a .py script"),
        ({"backend": "mainframe"}, "backend", "unknown backend"),
        ({"algorithm": "magic"}, "algorithm", "choose one of sync, async"),
        ({"algorithm_options": {"block_size": 4}}, "algorithm_options", "for algorithm 'sync'"),
        (
            {"algorithm": "bmuf", "algorithm_options": {"block_size": 0}},
            "algorithm_options",
            "block_size must be an integer in [1,",
        ),
    ],
)
async def test_submit_names_the_bad_field(
    api: Api, root: Path, change: dict[str, Any], field: str, words: str
) -> None:
    (root / "train.py").write_text("print('hi')\n")
    (root / "data.txt").write_text("1,2\n")
    (root.parent / "outside.py").write_text("print('escaped')\n")
    body = {"path": "train.py", "workers": 1, **change}
    for route in (("jobs",), ("jobs", "dryrun")):
        code, reply = await api("POST", *route, body=body)
        assert code == 400, reply
        assert reply.get("field") == field, reply
        assert words in reply["message"], reply
    code, listing = await api("GET", "jobs")
    assert listing["jobs"] == []


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        ('"timeout": 1e400', "timeout", "finite number"),  # JSON reads 1e400 as inf
        ('"timeout": -1e400', "timeout", "finite number"),
        ('"timeout": 1e-320', "timeout", "at least 1 s"),
        ('"timeout": 1e300', "timeout", "at most 31622400 s"),
        ('"timeout": 0', "timeout", "at least 1 s"),
        ('"workers": 100000000000000000000000000000', "workers", "at most 10000"),
        ('"workers": 1e400', "workers", "must be an integer"),
        ('"gpus_per_worker": 4096', "gpus_per_worker", "at most 64"),
        ('"max_restarts": 123456789', "max_restarts", "at most 10000"),
        ('"global_batch": 10000000000000', "global_batch", "at most 1000000000"),
    ],
)
async def test_submit_refuses_numbers_that_are_not_finite_or_absurd(
    api: Api, root: Path, raw: str, field: str, words: str
) -> None:
    (root / "train.py").write_text("print('hi')\n")
    for route in (("jobs",), ("jobs", "dryrun")):
        code, reply = await api("POST", *route, raw_body=f'{{"path": "train.py", {raw}}}')
        assert code == 400, reply
        assert reply["field"] == field and words in reply["message"], reply
        assert len(reply["message"].splitlines()) == 1
    # nothing was submitted, and the list stays valid JSON (it held Infinity)
    code, listing = await api("GET", "jobs")
    assert (code, listing["jobs"]) == (200, [])


@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity"])
async def test_a_body_with_nan_or_infinity_is_not_json(api: Api, root: Path, word: str) -> None:
    (root / "train.py").write_text("print('hi')\n")
    raw = f'{{"path": "train.py", "timeout": {word}}}'
    code, reply = await api("POST", "jobs", raw_body=raw)
    assert code == 400 and "not valid JSON" in reply["message"], reply
    assert word.lstrip("-") in reply["message"]
    code, listing = await api("GET", "jobs")
    assert listing["jobs"] == []


async def test_a_job_stored_with_an_infinite_timeout_still_lists_as_strict_json(
    api: Api,
) -> None:
    """Earlier versions accepted ``"timeout": 1e400``: the store holds that job's spec
    with Infinity. It lists, with the timeout as null, and every reply stays JSON."""
    record, _ = make_record(name="forever")
    spec = {**record.spec, "timeout": math.inf}
    get_store().update(record.id, spec=json.dumps(spec))
    assert "Infinity" in json.dumps(get_store().get(record.id).spec)  # type: ignore[union-attr]
    code, listing = await api("GET", "jobs")  # the api fixture refuses a bare Infinity
    assert code == 200, listing
    (job,) = listing["jobs"]
    assert job["name"] == "forever" and job["spec"]["timeout"] is None
    code, job = await api("GET", "jobs", record.id)
    assert code == 200 and job["spec"]["timeout"] is None


async def test_submit_reports_spec_and_bundle_errors_as_400(api: Api, root: Path) -> None:
    (root / "train.py").write_text("print('hi')\n")
    (root / "broken.py").write_text("def f(:\n")
    code, body = await api("POST", "jobs", body={"path": "train.py", "algorithm": "magic"})
    assert code == 400 and "algorithm" in body["message"]
    code, body = await api("POST", "jobs", body={"path": "train.py", "workers": 0})
    assert code == 400 and "workers" in body["message"]
    code, body = await api("POST", "jobs", body={"path": "broken.py"})
    assert code == 400, body
    code, listing = await api("GET", "jobs")
    assert listing["jobs"] == []


async def test_dryrun_preview_shows_the_command_and_submits_nothing(
    api: Api, root: Path, alchemist_home: Path
) -> None:
    (root / "sub").mkdir()
    (root / "sub" / "train.py").write_text("print('hi')\n")
    code, body = await api(
        "POST",
        "jobs",
        "dryrun",
        body={"path": "/sub/train.py", "workers": 3, "name": "preview", "env": {"SEED": "7"}},
    )
    assert code == 200, body
    code, unnamed = await api("POST", "jobs", "dryrun", body={"path": "sub/train.py", "name": ""})
    assert unnamed["spec"]["name"] == "train"
    assert code == 200, body
    assert "nothing was submitted" in body["text"]
    assert "world size 3" in body["text"]
    assert body["spec"]["name"] == "preview"
    assert body["spec"]["env"] == {"SEED": "7"}
    assert body["spec"]["entry"] == "script"
    code, listing = await api("GET", "jobs")
    assert listing["jobs"] == []
    assert not any((alchemist_home / "jobs").glob("*/spec.json"))


async def test_image_cpu_and_memory_reach_the_spec(api: Api, root: Path) -> None:
    (root / "train.py").write_text("print('hi')\n")
    body = {
        "path": "train.py",
        "image": "alchemist-train:1",
        "cpu": "2",
        "memory": "4Gi",
        "max_restarts": 1,
        "timeout": 30,
        "global_batch": 8,
    }
    code, reply = await api("POST", "jobs", "dryrun", body=body)
    assert code == 200, reply
    spec = reply["spec"]
    assert spec["image"] == "alchemist-train:1"
    assert spec["resources"] == {"gpus": 0, "cpu": "2", "memory": "4Gi"}
    assert (spec["max_restarts"], spec["timeout"], spec["global_batch"]) == (1, 30, 8)
    code, reply = await api("POST", "jobs", "dryrun", body={"path": "train.py", "cpu": 2})
    assert (code, reply["field"]) == (400, "cpu")
    assert "cpu must be a string" in reply["message"]


# -- submission: real jobs ------------------------------------------------------------------------


async def test_submit_a_notebook_runs_its_code_cells_in_order(api: Api, root: Path) -> None:
    (root / "train.ipynb").write_text(json.dumps(TRAIN_NOTEBOOK))
    code, job = await api(
        "POST", "jobs", body={"path": "train.ipynb", "workers": 2, "env": {"OMP_NUM_THREADS": "1"}}
    )
    assert code == 201, job
    assert job["name"] == "train" and job["owner"] == USER
    assert job["spec"]["workers"] == 2 and job["spec"]["entry"] == "script"

    done = await wait_for_state(api, job["id"], {"succeeded", "failed", "cancelled"}, 180)
    assert done["state"] == "succeeded", done
    assert done["latest"]["values"] == {"loss": pytest.approx(1 / 3)}

    code, metrics = await api("GET", "jobs", job["id"], "metrics")
    assert sorted((e["rank"], e["step"]) for e in metrics["events"] if e["rank"] == 0) == [
        (0, 0),
        (0, 1),
        (0, 2),
    ]
    for rank in (0, 1):
        code, logs = await api("GET", "jobs", job["id"], "logs", params={"rank": rank})
        assert f"cells ran in order on rank {rank} of 2" in logs["lines"], logs
    assert logs["ranks"] == [0, 1]


async def test_cancel_a_running_job(api: Api, root: Path) -> None:
    (root / "long.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    code, job = await api("POST", "jobs", body={"path": "long.py", "workers": 2})
    assert code == 201, job
    await wait_for_state(api, job["id"], {"running"}, 120)

    code, after = await api("DELETE", "jobs", job["id"])
    assert code == 200, after
    done = await wait_for_state(api, job["id"], {"cancelled", "failed", "succeeded"}, 60)
    assert done["state"] == "cancelled", done

    # cancelling again is a no-op that keeps the state
    code, again = await api("DELETE", "jobs", job["id"])
    assert (code, again["state"]) == (200, "cancelled")
    # (the suite's autouse fixture fails the test if any worker was left running)


# TensorBoard through this server: tests/server/test_proxy.py.


async def test_slow_calls_hold_up_neither_the_panels_reads_nor_the_servers_own_threads(
    api: Api, jp_fetch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Debug bundles that take long (here: held until released) fill the extension's
    slow threads; the panel's listing, the Jupyter server's own work on the event loop's
    default executor and its contents API still answer. Before, every call ran on that
    default executor (6 threads on 2 cores): a few slow ones stalled the whole server."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from alchemist.server import handlers

    record, _ = make_record()
    gate, inside = threading.Event(), threading.Semaphore(0)

    def held(*args: Any, **kwargs: Any) -> bytes:
        inside.release()
        gate.wait(120)
        return b""

    monkeypatch.setattr("alchemist.diagnosis.bundle.bundle_bytes", held)
    default_threads = ThreadPoolExecutor()._max_workers  # what the loop's default has
    slow = [
        asyncio.ensure_future(
            jp_fetch("alchemist", "api", "v1", "jobs", record.id, "diagnosis", "bundle",
                     raise_error=False, request_timeout=180)
        )
        for _ in range(min(8, max(default_threads, handlers.SLOW_THREADS + 1)))
    ]  # fmt: skip
    try:
        taken, deadline = 0, time.monotonic() + 60
        while taken < handlers.SLOW_THREADS:  # the slow threads are all taken (polled:
            assert time.monotonic() < deadline  # no thread of the loop's to wait with)
            if inside.acquire(blocking=False):
                taken += 1
            else:
                await asyncio.sleep(0.01)
        code, body = await asyncio.wait_for(api("GET", "jobs"), 30)
        assert code == 200 and record.id in [j["id"] for j in body["jobs"]]
        loop = asyncio.get_running_loop()
        assert await asyncio.wait_for(loop.run_in_executor(None, lambda: 42), 30) == 42
        contents = await asyncio.wait_for(jp_fetch("api", "contents"), 30)
        assert contents.code == 200
    finally:
        gate.set()
        done = await asyncio.gather(*slow)
    assert {r.code for r in done} == {200}
