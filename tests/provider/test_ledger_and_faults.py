"""The ledger as ground truth (typed records exported as NDJSON, read back the same) and the
provider-side faults a proxy cannot make: 500/429 after the charge was made, before
anything ran, slow answers; set in-process and at run time through /_harness/faults.
The 500-after-charge case is the negative control of `money_moved_once`: a retry with the
same key replays (one charge per order), a retry with a fresh key charges twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from harness.provider.control import ProviderControl
from harness.provider.errors import ProviderError
from harness.provider.faults import FaultRule
from harness.provider.records import (
    ChargeRecord,
    DeliveryRecord,
    RefundRecord,
    RequestInfo,
    RequestRecord,
    charges_per_business_key,
    parse_ledger,
    read_ledger,
    write_ledger,
)
from harness.provider.server import EmbeddedProvider, ProviderConfig
from tests.provider.conftest import Raw

ORDER = {"amount": "1250", "currency": "eur", "payment_method": "pm_card_visa", "confirm": "true",
         "metadata[order_id]": "o-1"}


def test_the_ledger_is_exported_as_typed_ndjson(tmp_path: Path) -> None:
    path = tmp_path / "ledger.ndjson"
    with EmbeddedProvider(ProviderConfig(seed=5, ledger_path=path)) as provider:
        raw = Raw(provider.url)
        paid = raw.post("/v1/payment_intents", ORDER, key="k-1").json()
        raw.post("/v1/payment_intents", {**ORDER, "payment_method": "pm_card_chargeDeclined",
                                         "metadata[order_id]": "o-2"}, key="k-2")
        raw.post("/v1/refunds", {"payment_intent": paid["id"], "amount": "250"}, key="k-3")
        served_text = raw.get("/_harness/ledger").text
        served = [json.loads(line) for line in served_text.splitlines()]
    records = read_ledger(path)
    assert parse_ledger(served_text) == records
    assert [json.loads(line) for line in path.read_text().splitlines()] == served
    charges = [r for r in records if isinstance(r, ChargeRecord)]
    assert [(c.amount, c.currency, dict(c.metadata), c.state, c.request.idempotency_key) for c in charges] == [
        (1250, "eur", {"order_id": "o-1"}, "partially_refunded", "k-1"),
        (1250, "eur", {"order_id": "o-2"}, "failed", "k-2")]
    assert charges[0].request.method == "POST" and charges[0].request.path == "/v1/payment_intents"
    assert charges[0].request.time > 0 and charges[0].amount_refunded == 250 and charges[0].moved_money
    [refund] = [r for r in records if isinstance(r, RefundRecord)]
    assert refund.charge == charges[0].id and refund.amount == 250 and refund.request.idempotency_key == "k-3"
    requested = [(r.operation, r.status) for r in records if isinstance(r, RequestRecord)]
    assert requested == [("payment_intents.create", 200), ("payment_intents.create", 402), ("refunds.create", 200)]
    write_ledger(tmp_path / "again.ndjson", records)
    assert read_ledger(tmp_path / "again.ndjson") == records


def test_a_500_after_the_charge_then_retries(raw: Raw, provider: EmbeddedProvider) -> None:
    provider.add_fault(FaultRule(operation="payment_intents.create", status=500, when="after", count=1))
    lost = raw.post("/v1/payment_intents", ORDER, key="order-o-1")
    assert lost.status_code == 500 and lost.json()["error"]["type"] == "api_error"
    assert len(charges_per_business_key(provider.ledger.records())["o-1"]) == 1  # it charged anyway
    same = raw.post("/v1/payment_intents", ORDER, key="order-o-1")
    # Stripe stores the 500 of a request that began executing: the retry gets it again, and no charge
    assert same.status_code == 500 and same.headers["Idempotent-Replayed"] == "true"
    assert len(charges_per_business_key(provider.ledger.records())["o-1"]) == 1
    fresh = raw.post("/v1/payment_intents", ORDER, key="order-o-1-attempt-2")
    assert fresh.status_code == 200
    twice = charges_per_business_key(provider.ledger.records())
    assert [c.request.idempotency_key for c in twice["o-1"]] == ["order-o-1", "order-o-1-attempt-2"]


def test_a_fault_that_stores_the_true_result_is_a_lost_reply(raw: Raw, provider: EmbeddedProvider) -> None:
    provider.add_fault(FaultRule(operation="payment_intents.create", status=429, when="after", count=1,
                                 stored="result"))
    lost = raw.post("/v1/payment_intents", ORDER, key="k-r")
    assert lost.status_code == 429 and lost.json()["error"]["type"] == "rate_limit_error"
    retry = raw.post("/v1/payment_intents", ORDER, key="k-r")
    assert retry.status_code == 200 and retry.headers["Idempotent-Replayed"] == "true"
    assert len(charges_per_business_key(provider.ledger.records())["o-1"]) == 1


def test_a_fault_before_running_charges_nothing_and_stores_nothing(raw: Raw, provider: EmbeddedProvider) -> None:
    provider.add_fault(FaultRule(operation="*", status=429, when="before", count=1))
    assert raw.post("/v1/payment_intents", ORDER, key="k-b").status_code == 429
    assert charges_per_business_key(provider.ledger.records()) == {}
    retry = raw.post("/v1/payment_intents", ORDER, key="k-b")
    assert retry.status_code == 200 and "Idempotent-Replayed" not in retry.headers
    assert len(charges_per_business_key(provider.ledger.records())["o-1"]) == 1


def test_a_slow_answer(raw: Raw, provider: EmbeddedProvider) -> None:
    slept: list[float] = []
    provider.api.sleep = slept.append
    provider.add_fault(FaultRule(operation="payment_intents.retrieve", status=None, delay=0.75))
    created = raw.post("/v1/payment_intents", ORDER).json()
    assert raw.get(f"/v1/payment_intents/{created['id']}").status_code == 200
    assert slept == [0.75]
    faulted = [r.fault for r in provider.ledger.records() if isinstance(r, RequestRecord)]
    assert faulted == [None, "delay 0.75s"]


def test_fault_draws_are_deterministic_per_seed() -> None:
    def statuses(seed: int) -> list[int]:
        with EmbeddedProvider(ProviderConfig(seed=seed)) as provider:
            provider.add_fault(FaultRule(operation="payment_intents.list", status=500, probability=0.5))
            raw = Raw(provider.url)
            return [raw.get("/v1/payment_intents").status_code for _ in range(24)]

    first = statuses(11)
    assert first == statuses(11) and {200, 500} == set(first)


def test_the_control_endpoint(raw: Raw, provider: EmbeddedProvider) -> None:
    url = provider.url + "/_harness/faults"
    rule = {"operation": "refunds.create", "status": 500, "when": "after", "count": 2}
    added = raw.session.post(url, json={"faults": [rule, {"operation": "*", "status": None, "delay": 0.01}]},
                             timeout=10)
    assert added.status_code == 200
    assert [f["operation"] for f in added.json()["faults"]] == ["refunds.create", "*"]
    assert "payment_intents.create" in added.json()["operations"]
    raw.get("/v1/payment_intents")
    assert [f["hits"] for f in raw.get("/_harness/faults").json()["faults"]] == [0, 1]
    for bad in ({"operation": "payments.charge", "status": 500}, {"status": 503}, {"status": 500, "when": "later"},
                {"status": 500, "colour": "red"}, {"status": "500"}, {"status": None}, [1]):
        refused = raw.session.post(url, json=bad, timeout=10)
        assert refused.status_code == 400, bad
        assert refused.headers["Content-Type"] == "application/problem+json" and refused.json()["detail"]
    assert raw.session.delete(url, timeout=10).json()["faults"] == []
    assert requests.post(url, json=rule, timeout=10).status_code == 401


def record(ident: str, order: str | None, state: str = "succeeded", captured: int = 1000, refunded: int = 0,
           key: str = "k") -> ChargeRecord:
    return ChargeRecord(id=ident, payment_intent="pi_" + ident, amount=1000, amount_captured=captured,
                        amount_refunded=refunded, currency="eur",
                        metadata={"order_id": order} if order else {}, payment_method="pm_card_visa",
                        state=state, failure_code=None, created=1,
                        request=RequestInfo("POST", "/v1/payment_intents", 1.0, "req_1", key, "sk_test_…abcd"))


def test_charges_per_business_key_counts_only_money_that_moved_and_stayed() -> None:
    ledger = [record("a", "o-1"), record("b", "o-1", state="refunded", refunded=1000),
              record("c", "o-2", state="failed", captured=0), record("d", "o-2", state="authorized", captured=0),
              record("e", None), record("f", "o-3", state="partially_refunded", refunded=400),
              record("g", "o-1", key="k2"),
              DeliveryRecord("evt_1", "charge.succeeded", "http://127.0.0.1:1/", 1, True, (200,))]
    per_order = charges_per_business_key(ledger)
    assert {key: [c.id for c in found] for key, found in per_order.items()} == {"o-1": ["a", "g"], "o-3": ["f"]}
    per_key = charges_per_business_key(ledger, key_by="/request/idempotency_key")
    assert sorted(per_key) == ["k", "k2"] and [c.id for c in per_key["k2"]] == ["g"]
    with pytest.raises(ProviderError):
        charges_per_business_key(ledger, key_by="metadata.order_id")


def test_the_control_client(raw: Raw, provider: EmbeddedProvider) -> None:
    control = ProviderControl(provider.url, "sk_test_control_1")
    rule = FaultRule(operation="payment_intents.create", status=500, when="after", count=1)
    control.add_fault(rule)
    assert raw.post("/v1/payment_intents", ORDER, key="k-x").status_code == 500
    assert control.faults() == [(rule, 1)]
    # Taking one rule out answers its hits, counted up to the removal (a plan's heal records them).
    assert control.remove_fault(rule) == 1
    assert control.faults() == []
    with pytest.raises(ProviderError, match="404"):
        control.remove_fault(rule)
    control.add_fault(rule)
    [charge] = [r for r in control.ledger() if isinstance(r, ChargeRecord)]
    assert charge.request.idempotency_key == "k-x"
    control.clear_faults()
    assert control.faults() == []
    with pytest.raises(ProviderError, match="401"):
        ProviderControl(provider.url, "nonsense").faults()
    with pytest.raises(ProviderError, match="400"):
        control._call("POST", "/_harness/faults", json={"status": 503})
    control.close()
