"""The Stripe webhook receiver of the PostgreSQL example (examples/pg_webhook_receiver.py,
mounted by examples/pg_payments_service.py) under `harness probe` with `webhooks:` alone:
the probe starts the service as `service:`, its database behind the dependency proxy
`db`, plays Stripe through the proxy `app` and counts each payment intent's bookings in
the database (the SQL oracle).

The correct mode passes under harness/plans/probe-webhooks.yaml, which delays the
receiver's answers past the provider's timeout (so the provider retries deliveries the
receiver already applied); each buggy mode fails by its own invariant:
event-id-check-then-insert and event-id-only → fact_applied_once (on concurrent copies,
and on the same object under a new event id), no-tolerance → refused_not_applied (a
stale timestamp applied; a future one alone, as past-only-tolerance applies it like
stripe-python's own verifier, is advice and passes), duplicate-500 →
delivery_acknowledged (a duplicate answered 500 is never acknowledged, even by the
provider's retry after the load), created-overwrites → acknowledged_fact_applied (a `created` delivered after its
`succeeded` sets the paid intent back). A slow handler (slow-handler) breaks no
invariant: `answered_in_time` reports it and the row `webhook-fast-2xx` fails."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from probe_helpers import ROOT

from harness.bundled import plan_path
from harness.probe.config import ProbeConfig, parse_config
from harness.probe.runner import ProbeResult, ProbeSpec, run_probe
from tests.support.postgres import PostgresDatabase

pytestmark = pytest.mark.slow
SCRIPT = ROOT / "examples/pg_payments_service.py"
CONFIG = ROOT / "examples/pg_webhook_receiver.yaml"


def receiver_config(mode: str, database: PostgresDatabase, **load: Any) -> ProbeConfig:
    raw = yaml.safe_load(CONFIG.read_text())
    raw["webhooks"][0]["effects"]["dsn"] = database.dsn  # the oracle reads the database directly
    raw.pop("plan")
    raw["load"].update(load)
    raw["service"] = {"command": [sys.executable, str(SCRIPT), "--webhook-mode", mode, "--port", "{port}",
                                  "--dsn", f"postgresql://{database.user}@{{dependency.db}}/{database.name}"],
                      "ready": {"path": "/healthz", "timeout": "20s"}}
    raw["dependencies"] = {"db": database.address}
    return parse_config(raw, source=str(CONFIG))


def probe(mode: str, database: PostgresDatabase, out: Path, *, plan: str | None = "probe-webhooks",
          **load: Any) -> ProbeResult:
    return run_probe(ProbeSpec(config=receiver_config(mode, database, **load), out_dir=out / mode,
                               plan=plan_path(plan) if plan else None))


def failed(result: ProbeResult) -> set[str]:
    return {inv.name for inv in result.check.invariants if not inv.passed}


def explain(result: ProbeResult) -> str:
    return result.summary() + "\n" + json.dumps(result.violations[:3], default=str)[:3000] + "\n" + \
        json.dumps(result.check.counts.get("webhooks"), default=str)


def test_the_correct_receiver_passes_with_its_answers_delayed_past_the_timeout(
        postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    result = probe("correct", postgres_db, tmp_path)
    assert result.verdict == "pass", explain(result)
    names = {inv.name: inv for inv in result.check.invariants}
    for name in ("fact_applied_once", "acknowledged_fact_applied", "refused_not_applied"):
        assert names[name].checked > 0, name
    entry = result.check.counts["webhooks"]["stripe-payments"]
    kinds = {kind.split(":")[0] for kind in entry["kinds"]}
    assert {"first", "retry", "concurrent_copy", "same_object_new_event", "out_of_order", "late_duplicate",
            "stale_signature", "future_timestamp", "tampered_body", "wrong_secret", "missing_header",
            "malformed_header", "unsupported_scheme"} <= kinds, kinds
    # The plan made the provider give up waiting (and retry) while the receiver had applied.
    assert entry["answered_late"] > 0, explain(result)
    rows = {row.id: row for row in result.conformance}
    for rid in ("webhook-raw-body", "webhook-dedupe-event", "webhook-dedupe-object", "webhook-out-of-order"):
        assert rows[rid].status == "pass", (rid, explain(result))
    # The run has one or two stale deliveries; on a busy machine the plan's latency may have
    # left every one unanswered (the provider's timeout), and then the row says so.
    tolerance = rows["webhook-tolerance"]
    assert tolerance.status == "pass" or (tolerance.status == "not observed"
                                          and "no delivery to refuse got an answer" in tolerance.evidence), \
        (tolerance, explain(result))
    # Every delivery is in the history with its kind, event id, fact and must_refuse.
    records = [json.loads(line) for path in (result.run_dir / "history").glob("webhooks-*.jsonl")
               for line in path.read_text().splitlines()]
    invokes = [r for r in records if r["type"] == "invoke" and r["op"] == "webhook"]
    assert invokes and all({"kind", "event_id", "fact", "must_refuse"} <= set(r) for r in invokes)
    with psycopg.connect(postgres_db.dsn) as connection:
        booked = connection.execute("SELECT count(*), count(DISTINCT intent_id) FROM webhook_payments").fetchone()
    assert booked is not None and booked[0] == booked[1] > 0


@pytest.mark.parametrize(("mode", "invariant", "row"), [
    ("event-id-check-then-insert", "fact_applied_once", "webhook-dedupe-event"),
    ("event-id-only", "fact_applied_once", "webhook-dedupe-object"),
    ("no-tolerance", "refused_not_applied", "webhook-tolerance"),
    ("duplicate-500", "delivery_acknowledged", "webhook-duplicate-2xx"),
    ("created-overwrites", "acknowledged_fact_applied", "webhook-out-of-order"),
])
def test_each_buggy_receiver_fails_by_its_own_invariant(
        mode: str, invariant: str, row: str, postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    result = probe(mode, postgres_db, tmp_path)
    assert result.verdict == "fail", explain(result)
    assert invariant in failed(result), explain(result)
    assert {row.id: row.status for row in result.conformance}[row] == "fail", explain(result)
    if mode == "event-id-only":
        messages = [v["message"] for v in result.violations if v["invariant"] == invariant]
        assert all("same_object_new_event" in message for message in messages), messages
    if mode == "created-overwrites":
        messages = [v["message"] for v in result.violations if v["invariant"] == invariant]
        assert messages and all("acknowledged (2xx) and never took effect" in message for message in messages)
    if mode == "duplicate-500":
        # Nothing applied twice: the unique violation rolled the duplicate back.
        assert "fact_applied_once" not in failed(result), explain(result)


def test_a_receiver_checking_age_only_like_stripes_sdk_passes_with_advice(
        postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    """stripe-python's construct_event refuses only old timestamps: a receiver doing the same
    applies the future_timestamp deliveries and breaks nothing Stripe requires."""
    result = probe("past-only-tolerance", postgres_db, tmp_path)
    assert result.verdict == "pass", explain(result)
    assert [advice.rule for advice in result.check.advice] == ["webhook-tolerance"], explain(result)
    assert result.document["advice"][0]["rule"] == "webhook-tolerance"
    assert {row.id: row.status for row in result.conformance}["webhook-tolerance"] == "pass", explain(result)
    refused = next(inv for inv in result.check.invariants if inv.name == "refused_not_applied")
    assert refused.checked > 0  # the stale deliveries (and the rest) are still judged


def test_a_slow_handler_is_reported_not_failed(postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    """No plan: every answer slower than the provider's 0.5 s comes from the handler itself."""
    result = probe("slow-handler", postgres_db, tmp_path, plan=None, duration="3s")
    assert result.verdict == "pass", explain(result)
    in_time = next(inv for inv in result.check.invariants if inv.name == "answered_in_time")
    assert in_time.passed and result.check.counts["webhooks"]["stripe-payments"]["answered_late"] > 0
    assert {row.id: row.status for row in result.conformance}["webhook-fast-2xx"] == "fail", explain(result)


def test_beside_the_api_one_run_judges_both(postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    """The example's API config (endpoints, two identities) with the receiver's `webhooks:`:
    one run, one history, one verdict, the endpoints' invariants and the receiver's."""
    config = receiver_config("correct", postgres_db)
    api = yaml.safe_load((ROOT / "examples/pg_payments_service.yaml").read_text())
    api["endpoints"][0]["effects"]["dsn"] = postgres_db.dsn
    raw = {**config.to_dict(), "endpoints": api["endpoints"], "identities": api["identities"]}
    both = parse_config(raw, source="test")
    result = run_probe(ProbeSpec(config=both, out_dir=tmp_path / "both", plan=plan_path("probe-webhooks")))
    assert result.verdict == "pass", explain(result)
    names = {inv.name for inv in result.check.invariants}
    assert {"one_resource_per_key", "identities_isolated", "fact_applied_once", "delivery_acknowledged"} <= names
    assert result.check.counts["webhooks"]["stripe-payments"]["acknowledged"] >= 10
    assert result.check.counts["acknowledged"] >= 10  # the API's own 2xx answers


SKEWED = """seed: 1
windows:
  - {at: 0.3s, for: 2.5s, clock: {target: service, skew: %s}}
"""


@pytest.mark.parametrize(("mode", "skew", "verdict"), [
    ("correct", "-360s", "fail"),              # checks the timestamp both ways: 6 min behind, it refuses all
    ("past-only-tolerance", "-360s", "pass"),  # checks age only, as stripe-python does: takes them
    ("correct", "360s", "pass"),               # 6 min ahead: every delivery is stale to it, refused as Stripe would
])
def test_a_receiver_whose_clock_is_off_is_judged_by_what_stripes_verifier_accepts(
        mode: str, skew: str, verdict: str, postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    plan = tmp_path / "skew.yaml"
    plan.write_text(SKEWED % skew)
    result = run_probe(ProbeSpec(config=receiver_config(mode, postgres_db, duration="3s"),
                                 out_dir=tmp_path / mode, plan=plan))
    assert result.verdict == verdict, explain(result)
    clock = result.check.counts["receiver_clock"]
    if verdict == "fail":
        assert failed(result) == {"delivery_acknowledged"}, explain(result)
        assert any("-360s off" in v["message"] for v in result.violations), explain(result)
    elif skew == "360s":
        assert clock["refused_past_tolerance"] > 0, clock
