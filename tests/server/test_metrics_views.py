"""The first-view routes of a long job, through a real Jupyter server: the metrics
summary (``?view=summary``) and a log's last lines (``?tail=N``), each with the cursor
that the ordinary paged reads continue from."""

from __future__ import annotations

import json

from alchemist.metrics.attempts import surviving
from alchemist.metrics.reader import MetricsReader
from tests.support.jobs import Api, make_record, write_events


async def test_the_metrics_summary_is_bounded_and_continues_by_cursor(api: Api) -> None:
    record, job_dir = make_record()
    events = [
        {
            "job_id": record.id,
            "rank": r,
            "attempt": 0,
            "step": s,
            "time": 1e9 + s,
            "values": {"loss": (s * 7919) % 1000 / 10, "acc": s / 5000},
        }
        for r in (0, 1)
        for s in range(5_000)
    ]
    events[1234]["values"]["loss"] = 1e6  # a spike on rank 0
    write_events(job_dir, events)
    code, body = await api(
        "GET", "jobs", record.id, "metrics", params={"view": "summary", "max_points": 100}
    )
    assert code == 200 and body["view"] == "summary" and body["complete"] is True
    assert body["metrics"] == ["loss", "acc"]
    series = {(s["metric"], s["rank"]): s for s in body["series"]}
    assert set(series) == {("loss", 0), ("acc", 0), ("loss", 1), ("acc", 1)}
    for (name, rank), s in series.items():
        assert len(s["steps"]) <= 108 and s["count"] == 5_000
        assert s["steps"][0] == 0 and s["steps"][-1] == 4_999
        values = [e["values"][name] for e in events if e["rank"] == rank]
        assert min(s["values"]) == min(values) and max(s["values"]) == max(values)
    assert max(series[("loss", 0)]["values"]) == 1e6
    assert body["progress"]["1"]["step"] == 4_999
    assert len(json.dumps(body)) < 20_000  # 10,000 events, a few hundred points

    # the events after the summary, paged by the usual cursor: every one, once
    later = [
        {
            "job_id": record.id,
            "rank": 0,
            "attempt": 0,
            "step": s,
            "time": 2e9,
            "values": {"loss": 1.0},
        }
        for s in range(5_000, 5_003)
    ]
    write_events(job_dir, later)
    code, body = await api("GET", "jobs", record.id, "metrics", params={"since": body["cursor"]})
    assert [e["step"] for e in body["events"]] == [5_000, 5_001, 5_002]


async def test_the_summary_reply_is_bounded_with_many_metric_keys(api: Api) -> None:
    record, job_dir = make_record()
    write_events(
        job_dir,
        [
            {
                "rank": 0,
                "step": s,
                "values": {f"metric_{k}": float(s % (k + 2)) for k in range(300)},
            }
            for s in range(400)
        ],
    )
    code, body = await api(
        "GET", "jobs", record.id, "metrics", params={"view": "summary", "max_points": 4000}
    )
    assert code == 200 and len(body["series"]) == 300
    assert sum(len(s["steps"]) for s in body["series"]) <= 50_000 + 300 * 8
    ov = MetricsReader(job_dir).overview()
    assert body["cursor"] == ov.cursor
    assert surviving(MetricsReader(job_dir).read(body["cursor"])[0]) == []


async def test_the_summary_view_refuses_paging_arguments(api: Api) -> None:
    record, _ = make_record()
    for params, field in (
        ({"view": "summary", "since": "0:10"}, "since"),
        ({"view": "summary", "max_bytes": 10}, "max_bytes"),
        ({"view": "everything"}, "view"),
        ({"max_points": 100}, "max_points"),
        ({"view": "summary", "max_points": 2}, "max_points"),
    ):
        code, body = await api("GET", "jobs", record.id, "metrics", params=params)
        assert (code, body.get("field")) == (400, field), params
    code, body = await api("GET", "jobs", record.id, "metrics", params={"view": "summary"})
    assert code == 200 and body["series"] == [] and body["cursor"] == ""


async def test_a_log_tail_reads_the_last_lines_and_follows_from_them(api: Api) -> None:
    record, job_dir = make_record()
    with open(job_dir.rank_log(1), "w") as f:
        f.write("".join(f"line {i:06d}\n" for i in range(200_000)) + "half a li")
    code, body = await api("GET", "jobs", record.id, "logs", params={"rank": 1, "tail": 3})
    assert code == 200
    assert body["lines"] == ["line 199997", "line 199998", "line 199999"]
    assert body["truncated"] is True  # earlier lines exist
    with open(job_dir.rank_log(1), "a") as f:
        f.write("ne\nnext\n")
    code, body = await api(
        "GET", "jobs", record.id, "logs", params={"rank": 1, "since": body["cursor"]}
    )
    assert body["lines"] == ["half a line", "next"]

    code, body = await api("GET", "jobs", record.id, "logs", params={"rank": 1, "tail": 0})
    assert body["lines"] == [] and body["cursor"] == job_dir.rank_log(1).stat().st_size
    code, body = await api(
        "GET", "jobs", record.id, "logs", params={"rank": 1, "tail": 5, "since": 10}
    )
    assert (code, body["field"]) == (400, "tail")
    code, body = await api("GET", "jobs", record.id, "logs", params={"rank": 1, "tail": -1})
    assert (code, body["field"]) == (400, "tail")
    code, body = await api("GET", "jobs", record.id, "logs", params={"rank": 7, "tail": 5})
    assert code == 200 and body["lines"] == [] and body["cursor"] == 0
