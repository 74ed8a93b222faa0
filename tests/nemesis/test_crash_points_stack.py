"""The crash-point fault against a real stack's app: the client sees the catalog's
points, arms each action and reads it back, a window's record counts the hits the
app logged, and `harness fault crash-point` / `list` / `clear` work on the stack."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from harness.catalog import CRASH_POINTS
from harness.cli.main import main
from harness.nemesis.crash_points import Arming, CrashPointClient, check_arming
from harness.nemesis.faults import CrashPointFault, FaultTargets
from harness.stack.local import Stack, start_stack
from tests.support.registry import registry_for_session
from tests.support.stacks import small_settings

ORDER = {"sku": "sku-1", "quantity": 1, "amount_cents": 500, "currency": "EUR"}

private_registry = pytest.fixture(registry_for_session, scope="module", autouse=True, name="private_registry")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, private_registry: Path) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("stack") / ".harness"
    running = start_stack(small_settings(root))
    try:
        yield running
    finally:
        running.down()


@pytest.fixture
def client(stack: Stack) -> Iterator[CrashPointClient]:
    crash_points = stack.nemesis().crash_points
    assert crash_points is not None
    yield crash_points
    crash_points.disarm_all()


def _create(stack: Stack) -> int:
    return requests.post(f"{stack.info.app_url}/api/v1/orders", json=ORDER, timeout=10,
                         headers={"Idempotency-Key": f"k-{uuid.uuid4().hex}"}).status_code


@pytest.mark.slow
def test_the_app_has_the_catalogs_crash_points(client: CrashPointClient) -> None:
    points = client.points()
    assert {name: (p.layer, p.process) for name, p in points.items()} == CRASH_POINTS
    assert all(p.armed is None and p.description for p in points.values())


@pytest.mark.slow
def test_each_action_is_armed_read_back_and_disarmed(client: CrashPointClient) -> None:
    for action in ("crash", "error", "delay", "drop-reply"):
        arming = check_arming(action, 0.5, 3, 200 if action == "delay" else None)
        point = client.arm("api.after_store", arming)
        assert point.armed == arming
        assert client.disarm("api.after_store").armed is None
    assert client.armed() == []


@pytest.mark.slow
def test_a_windows_record_counts_the_hits_the_app_logged(stack: Stack, client: CrashPointClient) -> None:
    targets = FaultTargets(network=stack.nemesis(), processes=stack, crash_points=client)
    fault = CrashPointFault("api.after_claim", Arming("delay", 1.0, 2, 50))
    fault.apply(targets, "w0")
    assert [_create(stack) for _ in range(3)] == [201, 201, 201]
    fault.heal(targets, "w0")
    record = fault.record("w0")
    assert record["hits"] == 2 and record["hit_times"] is not None and len(record["hit_times"]) == 2
    assert client.point("api.after_claim").armed is None


@pytest.mark.slow
def test_the_fault_commands_arm_list_and_clear_on_the_stack(stack: Stack, client: CrashPointClient,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    root = str(stack.info.root)
    assert main(["fault", "crash-point", "consumer.after_effect", "--action", "crash", "--probability", "0.25",
                 "--count", "4", "--root", root]) == 0
    assert "armed crash point consumer.after_effect (message, consumer): crash probability=0.25 count=4" \
        in capsys.readouterr().out
    assert main(["fault", "list", "--json", "--root", root]) == 0
    listed = json.loads(capsys.readouterr().out)["crash_points"]
    assert [(row["name"], row["action"], row["count"]) for row in listed] == [("consumer.after_effect", "crash", 4)]
    assert main(["fault", "clear", "--root", root]) == 0
    assert "disarmed 1 crash point(s)" in capsys.readouterr().out
    assert client.armed() == []
