"""A timeline per violation: its subject's operations as bars on one lane per user,
the fault windows and crash-point hits that overlapped them (harness.report.timeline)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
from html_probe import SVG, Probe, svgs, timelines
from report_sample import START, typed

from harness.report.html import faults_table
from harness.report.run_report import render_report, write_reports
from harness.report.series import RunSeries
from harness.report.timeline import (
    MAX_LANES,
    MAX_OPERATIONS,
    MAX_TIMELINES,
    TimelineCollector,
    lane_of,
    render_timeline,
    subject_of,
)
from harness.run.rundir import RunDir

CRASH_FAULT = {"name": "w3-crash-consumer-after-effect", "kind": "crash_point", "target": "consumer.after_effect",
               "type": None, "stream": None, "attributes": None, "toxicity": None, "action": "crash",
               "crash_point": "consumer.after_effect", "probability": 0.3, "count": None, "delay_ms": 0,
               "start": START + 19.0, "end": START + 20.5, "error": None, "hits": 2,
               "hit_times": [START + 19.3, START + 19.85]}


def _op(op_id: str, process: str, kind: str, invoked: float, completed: float, **fields: Any) -> dict[str, Any]:
    return {"op_id": op_id, "process": process, "op": fields.pop("op", "pay"), "type": kind,
            "invoke_time": START + invoked, "complete_time": START + completed, **fields}


def _elements(svg: Any, tag: str, cls: str | None = None) -> list[Any]:
    found = list(svg.iter(f"{SVG}{tag}"))
    return [e for e in found if cls is None or (e.get("class") or "").split()[:1] == [cls]]


def test_a_subject_is_the_violations_key_message_or_order() -> None:
    assert subject_of("ord_1", {"provider_refs": ["a", "b"]}).label == "order ord_1"
    keyed = subject_of(None, {"tenant": "t1", "idempotency_key": "k1", "order_ids": ["o1", "o2"]})
    assert keyed.label == "key k1" and keyed.keys == {"k1"} and keyed.order_ids == {"o1", "o2"}
    assert subject_of("o3", {"message_id": "m1"}).label == "message m1"
    assert subject_of(None, {"sku": "sku-1"}).empty


def test_lanes_are_locust_users_whatever_their_incarnation_and_consumers_their_own() -> None:
    assert lane_of({"process": "w0-u4-p0"}) == lane_of({"process": "w0-u4-p3"}) == "w0-u4"
    assert lane_of({"process": "consumer-2"}) == "consumer-2"
    assert lane_of({}) == "unknown process"


def test_the_timeline_draws_a_lane_per_user_a_bar_per_operation_and_the_faults_over_them() -> None:
    ops = [_op("w0-u1-p0:1", "w0-u1-p0", "info", 19.0, 21.0, idempotency_key="k1", error="ReadTimeout"),
           _op("w0-u1-p1:2", "w0-u1-p1", "ok", 21.1, 21.2, idempotency_key="k1", expect="retry_after_timeout"),
           _op("w1-u3-p0:1", "w1-u3-p0", "fail", 19.5, 19.6, op="webhook", status=409),
           _op("consumer-1:1", "consumer-1", "ok", 19.9, 20.0, op="publish")]
    payments = [{"order_id": "o1", "provider_ref": "pr_1", "source": "api", "source_id": "k1",
                 "applied_at": START + 19.4}]
    latency = {"name": "slow", "kind": "toxic", "target": "app", "start": START + 18.0, "end": START + 22.0}
    far = {"name": "far", "kind": "toxic", "target": "app", "start": START + 40.0, "end": START + 41.0}
    svg_text = render_timeline(subject_of("o1", {}), ops, [latency, far, CRASH_FAULT], START, payments=payments,
                               evidence_ids=frozenset({"w0-u1-p0:1"}))
    (svg,) = timelines(f"<div>{svg_text}</div>")
    assert svg.get("data-timeline") == "order o1" and svg.get("data-operations") == "4"
    lanes = {g.get("data-lane"): g.get("data-kind") for g in _elements(svg, "g", "lane")}
    assert lanes == {"w0-u1": "process", "w1-u3": "process", "consumer-1": "process",
                     "api payment": "marks", "crash-point hits": "marks"}
    bars = {r.get("data-op-id"): r for r in _elements(svg, "rect", "op")}
    assert {op_id: r.get("data-outcome") for op_id, r in bars.items()} == {
        "w0-u1-p0:1": "info", "w0-u1-p1:2": "ok", "w1-u3-p0:1": "fail", "consumer-1:1": "ok"}
    # A bar runs from invoke to completion: the 2 s timeout is wider than the 0.1 s reply.
    assert float(bars["w0-u1-p0:1"].get("width")) > 10 * float(bars["w0-u1-p1:2"].get("width"))
    assert float(bars["w0-u1-p0:1"].get("x")) < float(bars["w1-u3-p0:1"].get("x"))
    assert bars["w0-u1-p0:1"].get("stroke") != bars["w0-u1-p1:2"].get("stroke")  # evidence outlined
    assert "ReadTimeout" in bars["w0-u1-p0:1"].find(f"{SVG}title").text
    faults = [r.get("data-fault") for r in _elements(svg, "rect", "fault-window")]
    assert faults == ["slow @ app", "w3-crash-consumer-after-effect @ consumer.after_effect"]  # not the far one
    assert len(_elements(svg, "line", "crash-hit")) == 2
    assert "2 hit(s)" in "".join(svg.itertext())


def test_a_timeline_without_crash_points_or_hits_still_draws(tmp_path: Path) -> None:
    plain = {k: v for k, v in CRASH_FAULT.items() if k not in ("hits", "hit_times")}
    ops = [_op("w0-u1-p0:1", "w0-u1-p0", "ok", 19.0, 19.1)]
    (svg,) = timelines(render_timeline(subject_of("o1", {}), ops, [plain], START))
    assert _elements(svg, "rect", "fault-window") and not _elements(svg, "line", "crash-hit")
    assert render_timeline(subject_of("o1", {}), [], [], START) == ""


def test_lanes_and_operations_are_bounded() -> None:
    collector = TimelineCollector()
    evidence = [_op(f"w0-u{u}-p0:1", f"w0-u{u}-p0", "ok", 10.0, 10.1, order_id="o1") for u in range(3)]
    index = collector.add(subject_of("o1", {}), evidence)
    for n in range(5 * MAX_OPERATIONS):
        collector.offer(_op(f"w1-u{n}-p0:1", f"w1-u{n}-p0", "ok", float(n), n + 0.05, order_id="o1"))
    collector.offer(_op("other", "w2-u1-p0", "ok", 10.0, 10.1, order_id="o2"))
    ops = collector.operations(index)
    assert len(ops) == MAX_OPERATIONS
    ids = {op["op_id"] for op in ops}
    assert {op["op_id"] for op in evidence} <= ids and "other" not in ids
    # The others kept are the nearest to the evidence (at 10 s), not the first offered.
    kept = sorted(op["invoke_time"] - START for op in ops if op["op_id"].startswith("w1"))
    assert kept[0] < 10.0 < kept[-1] and kept[-1] - kept[0] < MAX_OPERATIONS + 1
    (svg,) = timelines(render_timeline(collector.subject(index), ops, [], START))
    assert len(_elements(svg, "g", "lane")) == MAX_LANES
    assert "more lane(s) not drawn" in "".join(svg.itertext())


def _with_crash_fault(run_dir: Path) -> None:
    with open(run_dir / "faults.jsonl", "ab") as log:
        log.write(orjson.dumps(CRASH_FAULT, option=orjson.OPT_APPEND_NEWLINE))


def test_the_report_draws_a_timeline_per_violation_from_the_history(
        failing_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, result = failing_run
    _with_crash_fault(run_dir)
    document = write_reports(RunDir(run_dir), typed(result)).report_html.read_text()
    drawn = timelines(document)
    assert [svg.get("data-timeline") for svg in drawn] == ["order ord_7f3a", "order ord_91bc"]
    first = drawn[0]
    # The history holds ~2,400 operations on ord_7f3a: the evidence and the nearest others, bounded.
    bars = _elements(first, "rect", "op")
    assert len(bars) == MAX_OPERATIONS
    assert {"w0-u4-p1:17", "w1-u3-p0:22"} <= {bar.get("data-op-id") for bar in bars}
    assert {bar.get("data-outcome") for bar in bars} >= {"ok", "info"}
    assert len({g.get("data-lane") for g in _elements(first, "g", "lane")}) >= 3
    assert _elements(first, "line", "crash-hit")
    # The second violation has no operations in its evidence or history: its payments are drawn.
    assert not _elements(drawn[1], "rect", "op") and _elements(drawn[1], "path", "mark")
    # The fault table counts the crash point's hits and says when they landed.
    probe = Probe(document)
    (hits,) = probe.find("span", **{"class": "hits"})
    assert hits["data-hits"] == "2" and "+19.300" in probe.all_text
    # ... and the time plots label its window with them.
    labels = {r.get("data-fault") for r in svgs(document)["throughput"].iter(f"{SVG}rect")
              if r.get("class") == "fault-window"}
    assert "w3-crash-consumer-after-effect @ consumer.after_effect (2 hits)" in labels


def test_a_crash_point_window_that_never_counted_its_hits_shows_none() -> None:
    unfinished = dict(CRASH_FAULT, hits=None, hit_times=None)
    table = faults_table([unfinished, {"name": "slow", "kind": "toxic", "start": START, "end": START + 1}], START)
    assert "<th class='num'>hits</th>" in table and "class='hits'" not in table
    assert "probability 0.3" in table
    assert "<th class='num'>hits</th>" not in faults_table([{"name": "slow", "kind": "toxic"}], START)


def test_only_the_first_violations_get_a_timeline(failing_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, result = failing_run
    many = copy.deepcopy(result)
    first = many["invariants"][0]
    template = first["violations"][0]
    first["violations"] = [dict(copy.deepcopy(template), order_id=f"ord_{n}") for n in range(MAX_TIMELINES + 5)]
    for n, violation in enumerate(first["violations"]):
        violation["message"] = f"order ord_{n} holds 2 payments"
    first["violation_count"] = len(first["violations"])
    drawn = timelines(render_report(typed(many), RunSeries(), []))
    assert len(drawn) == MAX_TIMELINES


def test_timelines_escape_what_the_run_wrote() -> None:
    ops = [_op("<b>x</b>", "w0-u1-p0", "ok", 1.0, 1.1, order_id="o'1", error="<script>")]
    text = render_timeline(subject_of("o'1", {}), ops, [], START)
    assert "<script>" not in text and "<b>" not in text
    (svg,) = timelines(text)
    assert svg.get("data-timeline") == "order o'1"
