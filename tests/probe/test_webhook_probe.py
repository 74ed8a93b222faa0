"""`harness probe` with `webhooks:` end to end, without a database of the test's own:
a receiver that is down throughout (it accepts each connection and resets it) is
INCONCLUSIVE, never PASS, with every delivery in the history; and the pytest plugin's
`idempotency_probe(..., webhooks=[...])` probes the PostgreSQL example's receiver from a
team's own test (the correct mode passes, event-id-only is caught)."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from probe_helpers import ROOT

from harness.bundled import plan_path
from harness.history import history_files, iter_operations
from harness.probe.config import parse_config
from harness.probe.runner import ProbeSpec, run_probe
from tests.support.postgres import PostgresDatabase
from tests.support.services import HttpService
from tests.webhooks.receiver import reset_server

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.slow
SCRIPT = ROOT / "examples/pg_payments_service.py"


def entry(effects: dict[str, str]) -> dict[str, object]:
    return {"name": "stripe", "path": "/webhooks/stripe", "scheme": "stripe", "secret": "whsec_test_123",
            "event": {"type": "payment_intent.succeeded",
                      "data": {"object": {"id": "pi_{uuid}", "amount": "{int:100-999}"}}},
            "fact": "/data/object/id", "sequence": ["payment_intent.created", "payment_intent.succeeded"],
            "timeout": "0.3s", "effects": effects}


def test_a_receiver_down_throughout_is_inconclusive_never_pass(tmp_path: Path) -> None:
    database = tmp_path / "effects.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE payments (id INTEGER PRIMARY KEY, intent TEXT)")
    effects = {"dsn": f"sqlite:///{database}", "query": "SELECT id FROM payments WHERE intent = :fact"}
    with reset_server() as base_url:
        config = parse_config({"upstream": base_url.removeprefix("http://"), "webhooks": [entry(effects)],
                               "load": {"duration": "2s"}}, source="test")
        result = run_probe(ProbeSpec(config=config, out_dir=tmp_path / "down"))
    assert result.verdict == "inconclusive", result.summary()
    assert any("webhook deliveries were acknowledged" in reason for reason in result.check.inconclusive_reasons)
    assert result.exit_code == 3
    deliveries = [op for op in iter_operations(history_files(result.run_dir / "history")) if op["op"] == "webhook"]
    assert deliveries and all(op["type"] == "info" for op in deliveries)
    assert any(op.get("late") for op in deliveries)  # the provider's late retry was made, and lost too
    assert {op["kind"] for op in deliveries} >= {"first", "retry", "concurrent_copy", "stale_signature"}
    document = json.loads((result.run_dir / "result.json").read_text())
    assert document["webhooks"] == [{"name": "stripe", "scheme": "stripe", "path": "/webhooks/stripe"}]
    assert "webhook first" in document["counts"]["statuses"]


def test_the_plugin_takes_webhooks(pytester: pytest.Pytester, http_services: Callable[..., HttpService],
                                   postgres_db: PostgresDatabase) -> None:
    def start(mode: str) -> HttpService:
        return http_services(f"receiver-{mode}", lambda port: [
            sys.executable, str(SCRIPT), "--webhook-mode", mode, "--port", str(port), "--dsn", postgres_db.dsn],
            env=os.environ)

    correct, event_id_only = start("correct"), start("event-id-only")
    effects = {"dsn": postgres_db.dsn, "query": "SELECT event_id FROM webhook_payments WHERE intent_id = :fact"}
    pytester.makepyfile(test_team=f"""
        import pytest

        WEBHOOKS = [{entry(effects)!r}]

        @pytest.mark.chaos
        @pytest.mark.probe_config(duration=3, plan={str(plan_path("probe-webhooks"))!r})
        def test_correct(idempotency_probe):
            result = idempotency_probe({correct.address!r}, webhooks=WEBHOOKS)
            assert result.passed, result.summary()
            assert "fact_applied_once" in {{inv.name for inv in result.check.invariants}}

        @pytest.mark.chaos
        def test_event_id_only(idempotency_probe):
            result = idempotency_probe({event_id_only.address!r}, webhooks=WEBHOOKS, duration=3)
            assert any(v["invariant"] == "fact_applied_once" for v in result.violations), result.summary()
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)
