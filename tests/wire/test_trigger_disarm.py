"""Disarming a step trigger (harness.toxiproxy.steps.StepWatch.disarm and `DELETE
/harness/proxies/NAME/triggers/ID`): a trigger not matched yet is taken back, one
that matched its step keeps its record (409), an unknown id is a 404."""

from __future__ import annotations

import pytest
import requests

from harness.ports import free_port
from harness.toxiproxy.server import EmbeddedToxiproxy
from harness.toxiproxy.steps import StepConfigError, StepWatch
from harness.toxiproxy.steps_client import ProxySteps, StepApiError


def test_a_watch_takes_back_an_unmatched_trigger_and_keeps_a_matched_one() -> None:
    watch = StepWatch("db", "postgres", "service")
    waiting = watch.arm({"action": "after", "step": "db COMMIT - service"})
    matched = watch.arm({"action": "before", "step": "db INSERT * service"})
    assert watch.seen("db INSERT payments service") is matched
    watch.disarm(waiting.id)
    assert watch.triggers == [matched]
    with pytest.raises(StepConfigError, match="matched its step"):
        watch.disarm(matched.id)
    with pytest.raises(ValueError):
        watch.disarm(99)


def test_the_api_disarms_by_id(embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    body = {"name": "db", "listen": "127.0.0.1:0", "upstream": f"127.0.0.1:{free_port()}"}
    assert requests.post(f"{embedded_toxiproxy.url}/proxies", json=body, timeout=5).status_code == 201
    steps = ProxySteps(embedded_toxiproxy.url, "db")
    steps.watch("postgres", "service")
    first = steps.arm("before", "db COMMIT - service")
    second = steps.arm("after", "db BEGIN - service")
    steps.disarm(first["id"])
    assert [trigger["id"] for trigger in steps.triggers()] == [second["id"]]
    with pytest.raises(StepApiError, match="404"):
        steps.disarm(first["id"])
