"""The Chaos tab's routes, driven over HTTP against a real Locust web UI and stack:
faults by hand, errors as problem+json, a run directory per test start, the verdict."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from webui_helpers import LocustWebUI, start_locust_web

from harness.stack.local import Stack


@pytest.fixture(scope="module")
def web(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocustWebUI]:
    ui = start_locust_web("mixed", stack.root, tmp_path_factory.mktemp("web"))
    try:
        yield ui
    finally:
        ui.stop()


@pytest.fixture(autouse=True)
def healed(web: LocustWebUI) -> Iterator[None]:
    yield
    assert web.act("POST", "/chaos/api/heal").status_code == 200


def state(web: LocustWebUI) -> dict:
    response = web.get("/chaos/api/state", params={"fresh": "1"})
    assert response.status_code == 200
    return response.json()


def toxics_of(document: dict, proxy: str) -> list[str]:
    return [toxic["name"] for row in document["proxies"] if row["name"] == proxy for toxic in row["toxics"]]


def test_the_tab_is_in_locusts_page(web: LocustWebUI) -> None:
    page = web.get("/").text
    assert 'data-harness-chaos="tab"' in page
    assert '{"key": "chaos", "title": "Chaos"}' in page  # Locust's extended_tabs, in its template args
    assert web.get("/chaos/").status_code == 200
    assert web.get("/chaos/assets/chaos.js").status_code == 200


def test_toxics_are_added_listed_and_removed(web: LocustWebUI) -> None:
    added = web.act("POST", "/chaos/api/toxics", {"proxy": "app", "type": "latency", "attributes": "latency=250 jitter=10",
                                                 "toxicity": "0.5", "name": "slow"})
    assert added.status_code == 200, added.text
    assert added.json()["attributes"] == {"latency": 250, "jitter": 10}
    document = state(web)
    assert toxics_of(document, "app") == ["slow"]
    assert any(fault["kind"] == "toxic" and "slow" in fault["detail"] for fault in document["faults"])
    rows = {item["key"]: item["data"] for item in web.get("/stats/requests").json()["extended_stats"]}["chaos"]
    assert any(row["what"] == "toxic" and row["target"] == "app" for row in rows)


    removed = web.act("DELETE", "/chaos/api/toxics/app/slow")
    assert removed.status_code == 200, removed.text
    again = web.act("DELETE", "/chaos/api/toxics/app/slow")
    assert again.status_code == 404 and again.headers["Content-Type"] == "application/problem+json"
    assert toxics_of(state(web), "app") == []


@pytest.mark.parametrize(("body", "status"), [
    ({"proxy": "nope", "type": "latency"}, 404),
    ({"proxy": "app", "type": "no_such_toxic"}, 400),
    ({"proxy": "app", "type": "latency", "attributes": "latency=fast"}, 400),
    ({"proxy": "app", "type": "latency", "toxicity": "2"}, 400),
    ({"proxy": "../x", "type": "latency"}, 400),
])
def test_bad_requests_are_problems(web: LocustWebUI, body: dict, status: int) -> None:
    response = web.act("POST", "/chaos/api/toxics", body)
    assert response.status_code == status
    assert response.headers["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == status and problem["title"] and problem["detail"]


def test_proxy_and_process_faults(web: LocustWebUI) -> None:
    assert web.act("POST", "/chaos/api/proxies/redis/disable").status_code == 200
    assert [row["enabled"] for row in state(web)["proxies"] if row["name"] == "redis"] == [False]
    assert web.act("POST", "/chaos/api/proxies/redis/enable").status_code == 200
    assert web.act("POST", "/chaos/api/services/consumer-1/pause").status_code == 200
    services = {row["name"]: row["status"] for row in state(web)["services"]}
    assert services["consumer-1"] == "paused"
    assert web.act("POST", "/chaos/api/services/consumer-1/resume").status_code == 200
    assert {row["name"]: row["status"] for row in state(web)["services"]}["consumer-1"] == "running"
    bad = web.act("POST", "/chaos/api/services/consumer-1/explode")
    assert bad.status_code == 400 and bad.headers["Content-Type"] == "application/problem+json"


def crash_point(document: dict, name: str) -> dict:
    return {row["name"]: row for row in document["crash_points"]}[name]


def test_crash_points_are_armed_listed_and_disarmed(web: LocustWebUI) -> None:
    document = state(web)
    assert document["crash_points_error"] is None and len(document["crash_points"]) >= 10
    assert crash_point(document, "api.after_store")["armed"] is None
    armed = web.act("POST", "/chaos/api/crash-points/api.after_store",
                    {"action": "delay", "delay_ms": 5, "probability": 0.5, "count": 3})
    assert armed.status_code == 200, armed.text
    assert armed.json()["armed"] == {"action": "delay", "probability": 0.5, "count": 3, "delay_ms": 5}
    document = state(web)
    assert crash_point(document, "api.after_store")["armed"]["action"] == "delay"
    assert [(f["kind"], f["target"]) for f in document["faults"]] == [("crash_point", "api.after_store")]
    rows = {item["key"]: item["data"] for item in web.get("/stats/requests").json()["extended_stats"]}["chaos"]
    assert any(row["what"] == "crash_point" and row["target"] == "api.after_store" for row in rows)

    disarmed = web.act("DELETE", "/chaos/api/crash-points/api.after_store")
    assert disarmed.status_code == 200 and disarmed.json()["armed"] is None
    assert crash_point(state(web), "api.after_store")["armed"] is None
    # Heal everything disarms them too.
    assert web.act("POST", "/chaos/api/crash-points/consumer.after_ack", {"action": "error", "count": 1}).ok
    assert web.act("POST", "/chaos/api/heal").status_code == 200
    assert all(row["armed"] is None for row in state(web)["crash_points"])


@pytest.mark.parametrize(("path", "body", "status"), [
    ("/chaos/api/crash-points/no.such_point", {"action": "crash"}, 404),
    ("/chaos/api/crash-points/api.after_store", {"action": "explode"}, 400),
    ("/chaos/api/crash-points/api.after_store", {"action": "crash", "probability": 2}, 400),
    ("/chaos/api/crash-points/api.after_store", {"action": "delay"}, 400),  # a delay needs delay_ms
    ("/chaos/api/crash-points/bad;name", {"action": "crash"}, 400),
])
def test_bad_armings_are_problems(web: LocustWebUI, path: str, body: dict, status: int) -> None:
    response = web.act("POST", path, body)
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    assert all(row["armed"] is None for row in state(web)["crash_points"])


def test_a_plans_crash_point_is_armed_through_the_tab(web: LocustWebUI) -> None:
    faults = web.get("/chaos/api/plans/crash-points").json()
    [drop] = [fault for fault in faults if fault["kind"] == "crash_point" and "drop-reply" in fault["describe"]]
    applied = web.act("POST", f"/chaos/api/plans/crash-points/faults/{drop['index']}")
    assert applied.status_code == 200, applied.text
    assert applied.json()["applied"] == drop["describe"]
    document = state(web)
    armed = crash_point(document, "api.after_store")["armed"]
    assert armed is not None and armed["action"] == "drop-reply"
    assert ("crash_point", "api.after_store") in [(f["kind"], f["target"]) for f in document["faults"]]
    assert web.act("POST", "/chaos/api/heal").status_code == 200
    assert crash_point(state(web), "api.after_store")["armed"] is None


def test_plan_faults(web: LocustWebUI) -> None:
    faults = web.get("/chaos/api/plans/flaky-network").json()
    assert faults and faults[0]["kind"] == "toxic" and "latency" in faults[0]["describe"]
    assert web.act("POST", "/chaos/api/plans/flaky-network/faults/0").status_code == 200
    assert toxics_of(state(web), "app") == ["plan_flaky_network_0"]
    again = web.act("POST", "/chaos/api/plans/flaky-network/faults/0")
    assert again.status_code == 409 and again.headers["Content-Type"] == "application/problem+json"
    assert web.act("POST", "/chaos/api/heal").status_code == 200
    applied = web.act("POST", "/chaos/api/plans/flaky-network/toxics").json()["applied"]
    toxic_faults = [fault for fault in faults if fault["kind"] == "toxic"]
    assert len(applied) == len(toxic_faults)
    document = state(web)
    assert len(toxics_of(document, "app") + toxics_of(document, "redis")) == len(toxic_faults)
    assert web.get("/chaos/api/plans/no-such-plan").status_code == 404


def test_reports_are_served_only_from_run_directories(web: LocustWebUI) -> None:
    for path in ("/chaos/runs/nothing/report.html", "/chaos/runs/..%2F..%2Fetc/passwd",
                 "/chaos/runs/x/state.json"):
        assert web.get(path).status_code == 404, path


def test_each_start_gets_a_run_directory_and_stop_a_verdict(web: LocustWebUI, stack: Stack) -> None:
    if state(web)["run"] is None:
        refused = web.act("POST", "/chaos/api/check")
        assert refused.status_code == 409 and refused.headers["Content-Type"] == "application/problem+json"
    run_ids = []
    for _ in range(2):
        started = web.post("/swarm", data={"user_count": "4", "spawn_rate": "4", "host": stack.info.app_url})
        assert started.status_code == 200 and started.json()["success"], started.text
        run = state(web)["run"]
        run_ids.append(run["id"])
        time.sleep(2)
        assert web.act("POST", "/chaos/api/toxics", {"proxy": "app", "type": "latency",
                                                   "attributes": {"latency": 100}, "toxicity": 0.3}).status_code == 200
        time.sleep(3)
        busy = web.act("POST", "/chaos/api/check")
        assert busy.status_code == 409  # the test is running
        assert web.post("/stop").json()["success"]
        verdict = web.wait_verdict()
        assert verdict["status"] == "done", verdict
        assert verdict["verdict"] in ("pass", "inconclusive"), verdict
        assert verdict["report_url"].endswith(f"/chaos/runs/{run['id']}/report.html")
        assert web.get(verdict["report_url"]).status_code == 200
    assert run_ids[0] != run_ids[1]
    for run_id in run_ids:
        run_dir = web.runs / run_id
        settings = json.loads((run_dir / "settings.json").read_text())
        assert settings["scenario"] == "mixed" and settings["scope"] == {"baseline": "baseline.ndjson"}
        assert list((run_dir / "histories").glob("*.jsonl")), run_id
        faults = [json.loads(line) for line in (run_dir / "faults.jsonl").read_text().splitlines()]
        assert [(fault["kind"], fault["target"]) for fault in faults] == [("toxic", "app")]
        assert faults[0]["end"] >= faults[0]["start"]
        # A run directory holds neither of the stack's secrets (docs/security.md).
        secrets = (stack.info.webhook_secret.encode(), stack.info.internal_token.encode())
        assert all(secrets)
        leaks = [path.name for path in run_dir.rglob("*") if path.is_file()
                 and any(secret in path.read_bytes() for secret in secrets)]
        assert leaks == [], leaks
    assert state(web)["faults"] == []



def test_a_crash_point_armed_during_a_run_is_logged_with_its_hits(web: LocustWebUI, stack: Stack) -> None:
    started = web.post("/swarm", data={"user_count": "4", "spawn_rate": "4", "host": stack.info.app_url})
    assert started.status_code == 200 and started.json()["success"], started.text
    run_id = state(web)["run"]["id"]
    time.sleep(1)
    before = crash_point(state(web), "api.after_domain")["hits"]
    armed = web.act("POST", "/chaos/api/crash-points/api.after_domain", {"action": "delay", "delay_ms": 1})
    assert armed.status_code == 200, armed.text
    time.sleep(2)
    assert web.act("DELETE", "/chaos/api/crash-points/api.after_domain").status_code == 200
    hits = crash_point(state(web), "api.after_domain")["hits"] - before
    assert web.post("/stop").json()["success"]
    assert web.wait_verdict()["status"] == "done"
    [line] = [json.loads(text) for text in (web.runs / run_id / "faults.jsonl").read_text().splitlines()]
    assert (line["kind"], line["crash_point"], line["action"], line["delay_ms"]) == \
        ("crash_point", "api.after_domain", "delay", 1)
    # The log counts up to its own read-back of the disarmed point, after ours: a request
    # of the 4 users already inside the point may land one more hit in between.
    assert hits >= 1 and hits <= line["hits"] <= hits + 4 and len(line["hit_times"]) == line["hits"]
    assert line["start"] <= min(line["hit_times"]) <= max(line["hit_times"]) <= line["end"]


def test_a_master_judges_its_workers_swarm(stack: Stack, tmp_path: Path) -> None:
    """On a master the tab is the master's: the workers (separate processes, over TCP)
    record into the run directory the master began, through Locust's messaging."""
    master = start_locust_web("mixed", stack.root, tmp_path, workers=2)
    try:
        started = master.post("/swarm", data={"user_count": "6", "spawn_rate": "6",
                                              "host": stack.info.app_url})
        assert started.status_code == 200 and started.json()["success"], started.text
        run_id = master.get("/chaos/api/state").json()["run"]["id"]
        time.sleep(8)
        assert master.post("/stop").json()["success"]
        verdict = master.wait_verdict()
        assert verdict["status"] == "done" and verdict["verdict"] in ("pass", "inconclusive"), verdict
        histories = sorted((master.runs / run_id / "histories").glob("*.jsonl"))
        assert len(histories) == 2, histories  # one file per worker, written by the master
        assert verdict["counts"]["operations"] > 0
    finally:
        master.stop()
