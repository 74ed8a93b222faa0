"""Each scenario, run for a few seconds against a healthy stack, provokes every kind of
duplicate it promises, and the app answers each deliberate duplicate as it must."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.stack import RunningStack, StackSettings, start_stack
from tests.load.locust_run import completions, expect_counts, records, run_locust

PROMISES = {
    "timeout_replay.py": {"double_click", "fingerprint_mismatch", "retry_after_timeout",
                          "retry_after_inflight"},
    "duplicate_webhooks.py": {"webhook_burst", "webhook_delayed", "webhook_out_of_order",
                              "conflicting_ref", "wrong_amount", "stale_signature",
                              "future_signature", "tampered_signature", "missing_signature"},
    "redelivered_messages.py": {"producer_duplicate", "same_fact_new_id"},
}
PROMISES["mixed.py"] = set().union(*PROMISES.values()) | {"cross_channel"}

# What a healthy app must answer to each deliberate duplicate that it has to refuse.
REJECTED_WITH = {
    "fingerprint_mismatch": {409},
    "conflicting_ref": {409},
    "wrong_amount": {422},
    "stale_signature": {400, 401},
    "future_signature": {400, 401},
    "tampered_signature": {400, 401},
    "missing_signature": {400, 401},
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    root = tmp_path_factory.mktemp("stack")
    settings = StackSettings(root=root, app_workers=2, consumers=2,
                             env={"TARGET_APP_INVENTORY": "sku-1=1000000,sku-2=1000000"})
    with start_stack(settings) as running:
        yield running


def load_env(state: dict[str, Any], history: Path) -> dict[str, str]:
    return {
        "HARNESS_HISTORY_DIR": str(history),
        "HARNESS_REDIS_URL": state["redis_url"],
        "HARNESS_STREAM": state["stream"],
        "TARGET_APP_WEBHOOK_SECRET": state["webhook_secret"],
        "HARNESS_SEED": "3",
        "HARNESS_SKUS": "sku-1,sku-2",
    }


@pytest.mark.slow
@pytest.mark.parametrize("locustfile", sorted(PROMISES))
def test_scenario_provokes_every_promised_duplicate(stack: RunningStack, tmp_path: Path,
                                                    locustfile: str) -> None:
    history = tmp_path / "histories"
    run_locust(locustfile, stack.state["app_url"], load_env(stack.state, history), users=4, seconds=4)
    recorded = records(history)
    counts = expect_counts(recorded)
    missing = PROMISES[locustfile] - set(counts)
    assert not missing, f"{locustfile} provoked {dict(counts)}, nothing of {sorted(missing)}"

    done = completions(recorded)
    invokes = {r["op_id"]: r for r in recorded if r["type"] == "invoke"}
    for op_id, invoke in invokes.items():
        completion = done.get(op_id)
        wanted = REJECTED_WITH.get(invoke.get("expect"))
        if completion is None or wanted is None:
            continue
        assert completion["type"] == "fail" and completion["status"] in wanted, (
            f"{invoke['expect']} answered {completion['type']} {completion['status']}")
    # Orders created with amounts; payments always carry the order's amount.
    created = [r for r in done.values() if r["op"] == "create_order" and r["type"] == "ok"]
    assert created and all(r["order_id"] for r in created)
