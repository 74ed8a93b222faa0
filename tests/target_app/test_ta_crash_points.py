"""Crash points (target_app/crashpoints.py): the registry on its shared folder (arming,
read-back, disarming, every action, probability, a count shared by several processes,
free when off), and the internal endpoints that arm them."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
from ta_helpers import INTERNAL_TOKEN

from harness.catalog import CRASH_POINTS
from target_app import crashpoints
from target_app.app import create_app
from target_app.crashpoints import (
    POINTS,
    CrashPointError,
    CrashPoints,
    CrashPointsDisabled,
    InvalidArming,
    UnknownCrashPoint,
)

AUTH = {"Authorization": f"Bearer {INTERNAL_TOKEN}"}


def points(tmp_path: Path, process: str = "app", **kwargs) -> CrashPoints:
    return CrashPoints(tmp_path / "cp", process, **kwargs)


def fresh_view(tmp_path: Path, process: str = "app") -> CrashPoints:
    """Another process's view: it reads the folder on its first reach."""
    return points(tmp_path, process)


# --- the registry -------------------------------------------------------------------

def test_the_harness_catalog_names_exactly_the_apps_crash_points() -> None:
    assert CRASH_POINTS == {name: (spec.layer, spec.process) for name, spec in POINTS.items()}
    for spec in POINTS.values():
        assert spec.layer in crashpoints.LAYERS and spec.process in crashpoints.PROCESSES
        assert spec.name.startswith("consumer." if spec.layer == "message" else spec.layer + ".")
        assert set(spec.actions) <= set(crashpoints.ACTIONS) and "crash" in spec.actions
        assert spec.description


def test_arm_reads_back_from_the_folder_and_reaches_other_processes(tmp_path: Path) -> None:
    control = points(tmp_path)
    entry = control.arm("consumer.after_effect", {"action": "crash", "probability": 0.3, "count": 5})
    assert entry == {"name": "consumer.after_effect", "layer": "message", "process": "consumer",
                     "description": POINTS["consumer.after_effect"].description,
                     "actions": ["crash", "error", "delay"],
                     "armed": {"action": "crash", "probability": 0.3, "count": 5, "delay_ms": 0},
                     "hits": 0}
    # another view of the same folder (a worker, a consumer) sees it too
    assert fresh_view(tmp_path).entry("consumer.after_effect")["armed"]["count"] == 5
    assert [e["name"] for e in control.entries()] == list(POINTS)
    assert all(e["armed"] is None for e in control.entries() if e["name"] != "consumer.after_effect")


def test_disarm_one_and_all(tmp_path: Path) -> None:
    control = points(tmp_path)
    control.arm("api.after_claim", {"action": "error"})
    control.arm("api.after_store", {"action": "drop-reply"})
    assert control.disarm("api.after_claim")["armed"] is None
    assert control.entry("api.after_store")["armed"]["action"] == "drop-reply"
    assert all(e["armed"] is None for e in control.disarm_all())
    worker = fresh_view(tmp_path)
    assert worker.reach("api.after_store") is False


def test_a_disarm_reaches_a_process_that_saw_the_arming(tmp_path: Path, monkeypatch) -> None:
    control, worker = points(tmp_path), fresh_view(tmp_path)
    control.arm("api.after_claim", {"action": "error"})
    with pytest.raises(CrashPointError):
        worker.reach("api.after_claim")
    control.disarm("api.after_claim")
    monkeypatch.setattr(crashpoints, "POLL_SECONDS", 0.0)
    worker._next_poll = 0.0  # as if a poll interval had passed
    assert worker.reach("api.after_claim") is False


def test_no_process_fires_after_a_disarm_has_returned(tmp_path: Path) -> None:
    """Within its poll interval a worker still holds the arming it read; an armed point
    looks again before it fires, so a window's hits all come before its disarming."""
    control, worker = points(tmp_path), fresh_view(tmp_path)
    control.arm("api.after_domain", {"action": "delay", "delay_ms": 1})
    for _ in range(3):
        worker.reach("api.after_domain")
    control.disarm("api.after_domain")
    disarmed_at = time.time()
    for _ in range(3):  # well inside POLL_SECONDS of the worker's last look
        worker.reach("api.after_domain")
    hits = control.hits()
    assert len(hits) == 3 and all(hit.at <= disarmed_at for hit in hits), hits


@pytest.mark.parametrize(("document", "field"), [
    ({}, "action"),
    ({"action": "explode"}, "action"),
    ({"action": "drop-reply"}, "action"),  # api.after_claim has no reply to drop yet
    ({"action": "crash", "probability": 0}, "probability"),
    ({"action": "crash", "probability": 1.5}, "probability"),
    ({"action": "crash", "probability": True}, "probability"),
    ({"action": "crash", "probability": "0.5"}, "probability"),
    ({"action": "crash", "count": 0}, "count"),
    ({"action": "crash", "count": 2.0}, "count"),
    ({"action": "crash", "count": True}, "count"),
    ({"action": "delay"}, "delay_ms"),
    ({"action": "delay", "delay_ms": 0}, "delay_ms"),
    ({"action": "delay", "delay_ms": -5}, "delay_ms"),
    ({"action": "crash", "when": "now"}, "when"),
])
def test_a_bad_field_is_refused_by_name(tmp_path: Path, document: dict, field: str) -> None:
    control = points(tmp_path)
    with pytest.raises(InvalidArming) as refused:
        control.arm("api.after_claim", document)
    assert refused.value.field == field
    assert control.entry("api.after_claim")["armed"] is None


def test_unknown_names(tmp_path: Path) -> None:
    control = points(tmp_path)
    for call in (lambda: control.arm("api.nowhere", {"action": "crash"}),
                 lambda: control.disarm("api.nowhere"), lambda: control.entry("api.nowhere")):
        with pytest.raises(UnknownCrashPoint):
            call()
    assert control.reach("api.nowhere") is False


def test_error_delay_and_drop_reply(tmp_path: Path) -> None:
    control, worker = points(tmp_path), fresh_view(tmp_path)
    control.arm("api.after_domain", {"action": "error"})
    control.arm("api.after_claim", {"action": "delay", "delay_ms": 150})
    control.arm("api.after_store", {"action": "drop-reply"})
    with pytest.raises(CrashPointError, match="api.after_domain"):
        worker.reach("api.after_domain")
    started = time.monotonic()
    assert worker.reach("api.after_claim") is False
    assert time.monotonic() - started >= 0.15
    assert worker.reach("api.after_store") is True
    assert worker.reach("webhook.after_apply") is False  # not armed
    hits = control.hits()
    assert [(h.name, h.action, h.process, h.pid) for h in hits] == [
        ("api.after_domain", "error", "app", os.getpid()), ("api.after_claim", "delay", "app", os.getpid()),
        ("api.after_store", "drop-reply", "app", os.getpid())]
    assert hits[0].at <= hits[1].at <= hits[2].at
    assert {e["name"]: e["hits"] for e in control.entries()}["api.after_store"] == 1


def _crash_child(directory: str, marker: str) -> None:
    cp = CrashPoints(Path(directory), "consumer")
    try:
        cp.reach("consumer.after_effect")
    finally:
        Path(marker).write_text("finally ran")  # a crash must not get here


def test_crash_ends_the_process_with_sigkill_and_no_finally(tmp_path: Path) -> None:
    control = points(tmp_path, "consumer")
    control.arm("consumer.after_effect", {"action": "crash"})
    marker = tmp_path / "marker"
    child = multiprocessing.get_context("fork").Process(
        target=_crash_child, args=(str(tmp_path / "cp"), str(marker)))
    child.start()
    child.join(10)
    assert child.exitcode == -signal.SIGKILL
    assert not marker.exists()
    [hit] = control.hits()
    assert (hit.name, hit.action, hit.process, hit.pid) == ("consumer.after_effect", "crash", "consumer", child.pid)


def test_probability_is_drawn_per_reach(tmp_path: Path) -> None:
    control = points(tmp_path)
    control.arm("domain.after_guard", {"action": "delay", "delay_ms": 1, "probability": 0.3})
    worker = CrashPoints(tmp_path / "cp", "app", seed=7)
    for _ in range(400):
        worker.reach("domain.after_guard")
    fired = control.entry("domain.after_guard")["hits"]
    assert 80 <= fired <= 160  # 120 expected; a seeded draw, so the same every run


def _reach_many(directory: str, times: int) -> None:
    cp = CrashPoints(Path(directory), "app")
    for _ in range(times):
        cp.reach("domain.after_create")
    os._exit(0)


def test_count_bounds_firings_across_processes(tmp_path: Path) -> None:
    control = points(tmp_path)
    control.arm("domain.after_create", {"action": "delay", "delay_ms": 1, "count": 7})
    context = multiprocessing.get_context("fork")
    children = [context.Process(target=_reach_many, args=(str(tmp_path / "cp"), 40)) for _ in range(4)]
    for child in children:
        child.start()
    for child in children:
        child.join(30)
        assert child.exitcode == 0
    hits = control.hits()
    assert len(hits) == 7 and control.entry("domain.after_create")["hits"] == 7
    assert len({hit.pid for hit in hits}) >= 1 and {hit.pid for hit in hits} <= {c.pid for c in children}
    # a new arming gets a new count
    control.arm("domain.after_create", {"action": "delay", "delay_ms": 1, "count": 2})
    worker = fresh_view(tmp_path)
    for _ in range(10):
        worker.reach("domain.after_create")
    assert control.entry("domain.after_create")["hits"] == 9


def test_without_a_folder_every_point_is_off_and_arming_is_refused() -> None:
    off = CrashPoints(None, "app")
    assert off.reach("api.after_claim") is False and not off.enabled
    with pytest.raises(CrashPointsDisabled):
        off.arm("api.after_claim", {"action": "crash"})
    assert off.disarm("api.after_claim")["armed"] is None and off.hits() == []


def test_free_when_off_no_system_call_per_reach(tmp_path: Path, monkeypatch) -> None:
    """Nothing armed: a reach is a dict lookup and a clock read; the folder is looked at
    (one stat) at most once per poll interval, whatever the number of reaches."""
    calls: list[object] = []
    real_stat = os.stat

    def counting_stat(*args, **kwargs):
        calls.append(args[0])
        return real_stat(*args, **kwargs)

    cp = points(tmp_path)
    off = CrashPoints(None, "app")
    monkeypatch.setattr(crashpoints.os, "stat", counting_stat)
    for _ in range(5000):
        cp.reach("api.after_claim")
        off.reach("api.after_claim")
    assert len(calls) <= 2, calls  # first reach, and perhaps one more poll interval


# --- the internal endpoints ------------------------------------------------------------

@pytest.fixture
def armed_client(settings, tmp_path: Path):
    from dataclasses import replace
    return create_app(replace(settings, crash_points_dir=str(tmp_path / "cp"))).test_client()


def test_endpoints_list_arm_read_back_and_disarm(armed_client) -> None:
    listed = armed_client.get("/internal/v1/crash-points", headers=AUTH)
    assert listed.status_code == 200
    assert [p["name"] for p in listed.json["points"]] == list(POINTS)
    put = armed_client.put("/internal/v1/crash-points/consumer.after_ack", headers=AUTH,
                           json={"action": "crash", "probability": 0.5, "count": 3})
    assert put.status_code == 200
    assert put.json["armed"] == {"action": "crash", "probability": 0.5, "count": 3, "delay_ms": 0}
    assert put.json["process"] == "consumer" and put.json["layer"] == "message"
    listed = armed_client.get("/internal/v1/crash-points", headers=AUTH).json["points"]
    assert {p["name"]: p["armed"] for p in listed}["consumer.after_ack"]["count"] == 3
    deleted = armed_client.delete("/internal/v1/crash-points/consumer.after_ack", headers=AUTH)
    assert deleted.status_code == 200 and deleted.json["armed"] is None
    armed_client.put("/internal/v1/crash-points/api.after_claim", headers=AUTH, json={"action": "error"})
    cleared = armed_client.delete("/internal/v1/crash-points", headers=AUTH)
    assert cleared.status_code == 200 and all(p["armed"] is None for p in cleared.json["points"])


def test_endpoints_refuse_bad_requests_as_problems(armed_client) -> None:
    unknown = armed_client.put("/internal/v1/crash-points/api.nowhere", headers=AUTH, json={"action": "crash"})
    assert unknown.status_code == 404 and unknown.content_type == "application/problem+json"
    assert armed_client.delete("/internal/v1/crash-points/api.nowhere", headers=AUTH).status_code == 404
    bad = armed_client.put("/internal/v1/crash-points/api.after_claim", headers=AUTH,
                           json={"action": "crash", "probability": 2})
    assert bad.status_code == 422 and bad.json["field"] == "probability"
    wrong_action = armed_client.put("/internal/v1/crash-points/consumer.after_read", headers=AUTH,
                                    json={"action": "drop-reply"})
    assert wrong_action.status_code == 422 and wrong_action.json["field"] == "action"
    not_json = armed_client.put("/internal/v1/crash-points/api.after_claim", headers=AUTH, data=b"crash")
    assert not_json.status_code == 400 and not_json.content_type == "application/problem+json"
    assert armed_client.get("/internal/v1/crash-points").status_code == 401
    assert armed_client.put("/internal/v1/crash-points/api.after_claim", json={"action": "crash"}).status_code == 401


def test_arming_an_app_without_a_folder_is_a_conflict(client) -> None:
    response = client.put("/internal/v1/crash-points/api.after_claim", headers=AUTH, json={"action": "crash"})
    assert response.status_code == 409 and response.json["type"] == "/problems/crash-points-disabled"
    assert client.get("/internal/v1/crash-points", headers=AUTH).json["points"][0]["armed"] is None


def test_hits_endpoint_lists_every_firing(armed_client) -> None:
    armed_client.put("/internal/v1/crash-points/api.after_claim", headers=AUTH, json={"action": "error"})
    body = {"sku": "sku-1", "quantity": 1, "amount_cents": 1000, "currency": "EUR"}
    for key in ("k1", "k2"):
        answer = armed_client.post("/api/v1/orders", json=body, headers={"Idempotency-Key": key})
        assert answer.status_code == 503 and answer.json["type"] == "/problems/transient-error"
    hits = armed_client.get("/internal/v1/crash-points/hits", headers=AUTH)
    assert hits.status_code == 200
    assert [(h["name"], h["action"], h["process"]) for h in hits.json["hits"]] == [
        ("api.after_claim", "error", "app")] * 2
    assert all(isinstance(h["pid"], int) and isinstance(h["at"], float) for h in hits.json["hits"])
