"""`RunningStack.restart_services`: the app and the consumers again, with another
TARGET_APP_* environment, on the same supervisor, Redis, Toxiproxy, proxies and ports
(the smoke job's lanes, harness.run.smoke, run their controls this way).

What must hold after it: the new configuration is the one the app answers with and the
one state.json records; the infrastructure's processes are the same ones; every crash
point is disarmed (an arm left by a cell must not fire in the next); with `flush_data`
no record of before is left (checked against the same restart without it, which keeps
the order: the test can tell); a refused request changes nothing; an app that will not
start is a one-line-headed StackError, and the stack still stops leaving nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from harness.nemesis.crash_points import Arming, CrashPointClient
from harness.run.drain import iter_export
from harness.stack.info import StackError
from harness.stack.local import RunningStack, start_stack
from tests.stack.conftest import create_order, stack_ports, wait_until_gone
from tests.support.stacks import small_settings

POINT = "consumer.after_effect"


def _pids(stack: RunningStack) -> dict[str, int | None]:
    return {row["name"]: row["pid"] for row in stack.services()}


def _unsafe_answered(stack: RunningStack) -> list[str]:
    """What the app says it runs without, asked through the stack's app proxy."""
    answer = requests.get(f"{stack.info.app_url}/healthz", timeout=5)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["unsafe_disable"])


def _order_ids(stack: RunningStack) -> set[str]:
    info = stack.info
    return {str(record["id"]) for record in iter_export(info.app_direct_url, token=info.internal_token)
            if record.get("kind") == "order"}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[RunningStack]:
    """A small stack of the test's own; stopped after, and nothing of it may be left."""
    root = tmp_path / "stack"
    running = start_stack(small_settings(root))
    assert isinstance(running, RunningStack)
    try:
        yield running
    finally:
        ports = stack_ports(running.info)
        pid = running.info.supervisor_pid
        running.down()
        processes, listening = wait_until_gone(root, ports, pids=(pid,) if pid else ())
        assert processes == [] and listening == [], f"leaked after down: {processes} {listening}"


@pytest.mark.slow
def test_restart_services_changes_the_app_and_keeps_the_rest(stack: RunningStack) -> None:
    root = Path(stack.root)
    before = _pids(stack)
    supervisor = stack.info.supervisor_pid
    secret = stack.info.webhook_secret
    assert create_order(stack.info.app_url).status_code == 201
    kept = _order_ids(stack)
    assert len(kept) == 1
    points = CrashPointClient(stack.info.app_direct_url, stack.info.internal_token)
    points.arm(POINT, Arming("crash", probability=1.0, count=5))
    assert [point.name for point in points.armed()] == [POINT]

    stack.restart_services({"TARGET_APP_UNSAFE_DISABLE": "api"})

    after = _pids(stack)
    for name in ("redis", "toxiproxy"):
        assert after[name] == before[name] and after[name] is not None, name
    for name in ("app", "consumer-1"):
        assert after[name] != before[name] and after[name] is not None, name
    assert stack.info.supervisor_pid == supervisor and stack.info.webhook_secret == secret
    assert stack.info.unsafe_disable == ("api",)
    assert json.loads((root / "stack-settings.json").read_text())["env"] == {"TARGET_APP_UNSAFE_DISABLE": "api"}
    assert _unsafe_answered(stack) == ["api"]  # through the same proxy, on the same port
    assert all(row["healthy"] and row["status"] == "running" for row in stack.services())
    # the arm the last configuration left is gone, and nothing fires in this one
    points = CrashPointClient(stack.info.app_direct_url, stack.info.internal_token)
    assert points.armed() == [] and points.hits() == []
    # without flush_data the data stays (the control for the flush below)
    assert _order_ids(stack) == kept

    stack.restart_services({}, app_workers=1, flush_data=True)

    assert _unsafe_answered(stack) == [] and stack.info.unsafe_disable == ()
    assert stack.info.app_workers == 1
    assert _order_ids(stack) == set()  # nothing of before
    # the app seeded its data again, as on a fresh stack: an order can be placed
    assert create_order(stack.info.app_url).status_code == 201
    assert len(_order_ids(stack)) == 1


@pytest.mark.slow
def test_a_refused_or_failed_restart_says_why_and_the_stack_still_stops(stack: RunningStack) -> None:
    before = _pids(stack)
    for env, words in (({"PATH": "/bin"}, "only TARGET_APP_"),
                       ({"TARGET_APP_STREAM": "elsewhere"}, "TARGET_APP_STREAM cannot change")):
        with pytest.raises(StackError, match=words):
            stack.restart_services(env)
        assert _pids(stack) == before  # refused before anything was stopped
    # an app that cannot start with its settings: the error names it and its log
    with pytest.raises(StackError) as failed:
        stack.restart_services({"TARGET_APP_IDEMPOTENCY_TTL": "not-a-number"})
    assert "app exited" in str(failed.value) and "app.log" in str(failed.value)
    assert str(failed.value).splitlines()[0].startswith("restart_services:")
