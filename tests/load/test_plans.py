"""The shipped fault plans provoke the paths they claim, against a real stack.

`flaky-network` claims (and promises), within the first 8 s (a smoke run), lost
replies after the create script ran (the API layer's recovery point) and request
bodies cut in transit (the app's incomplete-body refusal, and the client's retry of
the whole body). `consumer-crashes` claims reclaims by another consumer when the
reclaim time is short (TARGET_APP_RECLAIM_IDLE_MS <= 1500). Measured from the app's
own counters and from the history.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.history import LOAD_STARTED
from harness.nemesis.plans import NemesisRunner, load_plan, schedule
from harness.nemesis.toxiproxy_client import Nemesis
from harness.run.drain import iter_export, wait_for_drain
from harness.stack.local import Stack, StackSettings, start_stack
from tests.load.locust_run import completions, expect_counts, load_env, records, run_locust

PLANS = Path(__file__).resolve().parents[2] / "harness" / "plans"
SMOKE_SECONDS = 8
LOAD_START_TIMEOUT = 60.0  # Locust's start on a busy machine, bounded


INVENTORY = {"TARGET_APP_INVENTORY": "sku-1=1000000,sku-2=1000000"}
# The short reclaim time consumer-crashes asks for, and the smoke job's handler delay.
RECLAIM_ENV = {"TARGET_APP_RECLAIM_IDLE_MS": "1000", "TARGET_APP_HANDLER_DELAY_MS": "50"}


def _stack(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Stack]:
    settings = StackSettings(root=tmp_path_factory.mktemp("stack"), app_workers=2, consumers=2,
                             env={**INVENTORY, **env})
    with start_stack(settings) as running:
        yield running


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from _stack(tmp_path_factory, {})


@pytest.fixture(scope="module")
def reclaiming_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from _stack(tmp_path_factory, RECLAIM_ENV)


def run_under_plan(stack: Stack, plan: str, locustfile: str, history: Path, *,
                   users: int, log: Path) -> dict[str, int]:
    """Run the load with the plan's nemesis beside it; the app's counters afterwards.

    The plan's clock starts when the load does (the `.load-started` mark Locust's
    master writes at its first user), as `harness run` starts it: started before
    Locust instead, a busy machine's slow Locust start let the early windows pass
    with no request to cut (flaky-network's recovery point missed in CI)."""
    info = stack.info
    runner = NemesisRunner(Nemesis(info.toxiproxy_url), stack, log)
    with ThreadPoolExecutor(max_workers=1) as pool:
        load = pool.submit(run_locust, locustfile, info.app_url, load_env(info, history), users=users,
                           seconds=SMOKE_SECONDS, timeout=120)
        try:
            deadline = time.monotonic() + LOAD_START_TIMEOUT
            while not (history / LOAD_STARTED).exists() and not load.done() and time.monotonic() < deadline:
                time.sleep(0.02)
            if load.done():
                load.result()  # Locust's own failure, if it ended before its users started
            assert (history / LOAD_STARTED).exists(), "the load never started (no .load-started mark)"
            runner.start(schedule(load_plan(PLANS / f"{plan}.yaml"), float(SMOKE_SECONDS)))
            load.result()
        finally:
            runner.stop()
    runner.report().raise_for_failure()
    wait_for_drain(info, timeout=30)
    (counters,) = [line for line in iter_export(info.app_direct_url, token=info.internal_token or None)
                   if line["kind"] == "counters"]
    return counters


@pytest.mark.slow
def test_flaky_network_reaches_the_recovery_point_and_cuts_bodies(stack: Stack,
                                                                   tmp_path: Path) -> None:
    history = tmp_path / "histories"
    counters = run_under_plan(stack, "flaky-network", "timeout_replay.py", history, users=10,
                              log=tmp_path / "faults.jsonl")
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


@pytest.mark.slow
def test_consumer_crashes_make_another_consumer_reclaim(reclaiming_stack: Stack,
                                                        tmp_path: Path) -> None:
    history = tmp_path / "histories"
    counters = run_under_plan(reclaiming_stack, "consumer-crashes", "redelivered_messages.py",
                              history, users=2, log=tmp_path / "faults.jsonl")
    assert counters["messages_reclaimed"] > 0, counters
    # Reclaims and crashes never park a payment: the messages are all valid.
    assert counters["messages_dead_lettered"] == 0, counters
