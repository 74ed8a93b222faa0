"""The shipped fault plans provoke the paths they claim, against a real stack.

`flaky-network` claims, within the first 8 s (a smoke run), lost replies after the
create script ran (the API layer's recovery point) and request bodies cut in
transit (the app's incomplete-body refusal, and the client's retry of the whole
body). Measured from the app's own counters and from the history.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.drain import iter_export, wait_for_drain
from harness.faults import NemesisRunner, load_plan, schedule
from harness.nemesis import Nemesis
from harness.stack import RunningStack, StackSettings, start_stack
from tests.load.locust_run import completions, expect_counts, records, run_locust
from tests.load.test_scenarios import load_env

PLANS = Path(__file__).resolve().parents[2] / "plans"
SMOKE_SECONDS = 8


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    root = tmp_path_factory.mktemp("stack")
    settings = StackSettings(root=root, app_workers=2, consumers=2,
                             env={"TARGET_APP_INVENTORY": "sku-1=1000000,sku-2=1000000"})
    with start_stack(settings) as running:
        yield running


@pytest.mark.slow
def test_flaky_network_reaches_the_recovery_point_and_cuts_bodies(stack: RunningStack,
                                                                   tmp_path: Path) -> None:
    state = stack.state
    history = tmp_path / "histories"
    runner = NemesisRunner(Nemesis(state["toxiproxy_url"]), stack, tmp_path / "faults.jsonl")
    runner.start(schedule(load_plan(PLANS / "flaky-network.yaml"), float(SMOKE_SECONDS)))
    try:
        run_locust("timeout_replay.py", state["app_url"], load_env(state, history), users=10,
                   seconds=SMOKE_SECONDS, timeout=120)
    finally:
        runner.stop()
    assert runner.failure is None
    wait_for_drain(state, timeout=30)
    (counters,) = [line for line in iter_export(state["app_direct_url"], token=state.get("internal_token"))
                   if line["kind"] == "counters"]
    assert counters["api_recovered"] > 0, counters
    assert counters["api_incomplete_bodies"] > 0, counters

    recorded = records(history)
    done = completions(recorded)
    cut = [c for c in done.values() if c.get("problem_type") == "/problems/incomplete-body"]
    assert cut and all(c["status"] == 400 and c["type"] == "fail" for c in cut)
    assert expect_counts(recorded)["retry_after_bad_request"] > 0
    # A whole retry of a cut create is handled: the cut request was never stored.
    retried = [c for r in recorded if r["type"] == "invoke" and r.get("expect") == "retry_after_bad_request"
               and r["op"] == "create_order" and (c := done.get(r["op_id"])) is not None]
    assert any(c["type"] == "ok" for c in retried)
    assert not any(c.get("problem_type") == "/problems/idempotency-key-mismatch" for c in retried)
