"""The probe's `provider:` pieces without a whole run: the config section and its one-line
errors (exit 2, no run directory), `{provider.url}`, generators in a path, the ledger
invariants on a ledger the official stripe SDK made against the real provider, the
report's ledger table and the `payment_provider` fixture."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import stripe

from harness.cli.main import main
from harness.generators import render_path
from harness.probe.checker import ProbeCheck
from harness.probe.config import ProbeConfigError, parse_config
from harness.probe.ledger_checks import check_ledger, combine_ledger, rows_to_dicts
from harness.probe.report import render_report
from harness.probe.service_config import render
from harness.provider.faults import FaultRule
from harness.provider.server import EmbeddedProvider

KEY = "sk_test_probe"
PAY = {"name": "pay", "path": "/orders/ord_{uuid}/pay", "requires_key": False,
       "body": {"amount": "{int:100-999}", "currency": "eur"}, "id": {"pointer": "/order_id"}}
SERVICE = {"command": ["app", "--port", "{port}"], "env": {"STRIPE_API_BASE": "{provider.url}"}}


def config(**provider: Any) -> Any:
    return parse_config({"endpoints": [PAY], "service": SERVICE, "provider": provider}, source="probe.yaml")


def test_the_provider_section_round_trips_and_fills_provider_url() -> None:
    parsed = config(key_by="/metadata/order_id", faults=[{"operation": "payment_intents.create",
                                                          "status": 500, "probability": 0.3}],
                    webhooks=[{"path": "/hooks/stripe", "secret": "whsec_test_probe"}])
    assert parsed.provider is not None and parsed.provider.faults[0] == FaultRule(
        operation="payment_intents.create", status=500, probability=0.3)
    assert parse_config(parsed.to_dict()) == parse_config(parsed.to_dict())
    assert parse_config(parsed.to_dict()).provider == parsed.provider
    [hook] = parsed.provider.webhooks  # Stripe's duplicates and disorder by default, not in order only
    assert hook.kinds == ("first", "concurrent_copy", "late_duplicate", "out_of_order") and hook.timeout == 10
    tuned = config(webhooks=[{"path": "/h", "secret": "whsec_test_probe", "kinds": ["out_of_order"],
                              "late_after": "300ms", "timeout": "2s", "name": "hooks"}]).provider
    assert tuned is not None and tuned.webhooks[0].kinds == ("out_of_order",)
    assert (tuned.webhooks[0].late_after, tuned.webhooks[0].timeout, tuned.webhooks[0].name) == (0.3, 2.0, "hooks")
    assert parsed.service is not None
    env = parsed.service.environment(8000, {"provider": "127.0.0.1:4242"})
    assert env == {"STRIPE_API_BASE": "http://127.0.0.1:4242"}
    assert render("{provider.url}/v1", 1, {"provider": "127.0.0.1:9"}) == "http://127.0.0.1:9/v1"


@pytest.mark.parametrize(("provider", "field"), [
    ({"kind": "paypal"}, "provider.kind"),
    ({"key_by": "metadata.order_id"}, "provider.key_by"),
    ({"api_key": "sk_live_x"}, "provider.api_key"),
    ({"faults": [{"status": 503}]}, "provider.faults[0].status"),
    ({"faults": [{"when": "during"}]}, "provider.faults[0].when"),
    ({"faults": [{"operation": "charges.create"}]}, "provider.faults[0].operation"),
    ({"faults": [{"probability": 0}]}, "provider.faults[0].probability"),
    ({"faults": [{"colour": "red"}]}, "provider.faults[0]"),
    ({"webhooks": [{"path": "hooks", "secret": "whsec_test_probe"}]}, "provider.webhooks[0].path"),
    ({"webhooks": [{"path": "/hooks", "secret": "short"}]}, "provider.webhooks[0].secret"),
    ({"webhooks": [{"path": "/hooks", "secret": "whsec_test_probe", "kinds": ["retry"]}]},
     "provider.webhooks[0].kinds"),
    ({"webhooks": [{"path": "/hooks", "secret": "whsec_test_probe", "kinds": "first"}]}, "provider.webhooks[0].kinds"),
    ({"webhooks": [{"path": "/hooks", "secret": "whsec_test_probe", "scheme": "github"}]},
     "provider.webhooks[0].scheme"),
    ({"webhooks": [{"path": "/hooks", "secret": "whsec_test_probe", "timeout": 0}]}, "provider.webhooks[0].timeout"),
    ({"webhooks": [{"path": "/hooks", "secret": "whsec_test_probe", "late_after": "2m"}]},
     "provider.webhooks[0].late_after"),
    ({"webhooks": [{"path": "/a", "secret": "whsec_test_probe", "name": "x"},
                   {"path": "/b", "secret": "whsec_test_probe", "name": "x"}]}, "provider.webhooks"),
    ({"endpoints": ["refund"]}, "provider.endpoints"),
    ({"colour": 1}, "provider"),
])
def test_errors_name_the_field(provider: dict[str, Any], field: str) -> None:
    with pytest.raises(ProbeConfigError) as error:
        config(**provider)
    assert str(error.value).startswith(f"probe.yaml: {field}:"), str(error.value)
    assert "\n" not in str(error.value)


def test_provider_url_needs_a_provider_section() -> None:
    with pytest.raises(ProbeConfigError, match=r"service.env.STRIPE_API_BASE: \{provider.url\} needs"):
        parse_config({"endpoints": [PAY], "service": SERVICE})


def test_a_provider_needs_a_service_to_tell_its_url() -> None:
    with pytest.raises(ProbeConfigError, match=r"^probe.yaml: provider: needs `service:`"):
        parse_config({"endpoints": [PAY], "upstream": "127.0.0.1:9", "provider": {}}, source="probe.yaml")


def test_the_cli_exits_2_on_one_line_and_makes_no_run_directory(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "probe.yaml"
    path.write_text("endpoints:\n  - {path: /p, body: {a: '{uuid}'}, id: {pointer: /id}}\n"
                    "service: {command: [app, '{port}']}\nprovider: {faults: [{status: 501}]}\n")
    out = tmp_path / "run"
    assert main(["probe", "--config", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"harness: {path}: provider.faults[0].status:") and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_generators_work_in_a_path_and_leave_other_braces() -> None:
    first = render_path("/orders/ord_{uuid}/pay/{int:1-3}/{id}", random.Random(1), key="k")
    again = render_path("/orders/ord_{uuid}/pay/{int:1-3}/{id}", random.Random(1), key="k")
    other = render_path("/orders/ord_{uuid}/pay/{int:1-3}/{id}", random.Random(2), key="k")
    assert first == again != other
    assert first.startswith("/orders/ord_") and first.endswith("/{id}") and "{uuid}" not in first
    assert render_path("/a/{choice:x y}/{key}", random.Random(0), key="k 1") == "/a/x%20y/k%201"


def _op(order: str, kind: str, status: int, key: str, at: float) -> dict[str, Any]:
    completion = "ok" if status < 300 else "fail" if status < 500 else "info"
    return {"op": "create_order", "endpoint": "pay", "type": completion, "status": status, "expect": kind,
            "idempotency_key": key, "path": f"/orders/{order}/pay", "body": {"amount": 500},
            "invoke_time": at, "complete_time": at + 0.01}


def _charge(client: stripe.StripeClient, order: str, key: str | None, method: str = "pm_card_visa") -> None:
    params: dict[str, Any] = {"amount": 500, "currency": "eur", "payment_method": method, "confirm": True,
                              "metadata": {"order_id": order}}
    try:
        client.v1.payment_intents.create(params=params,  # type: ignore[arg-type]
                                         options={"idempotency_key": key} if key else None)
    except stripe.CardError:
        pass


def test_the_ledger_invariants_catch_each_violation_on_a_real_ledger(payment_provider: EmbeddedProvider) -> None:
    client = stripe.StripeClient(KEY, base_addresses={"api": payment_provider.url}, max_network_retries=0)
    _charge(client, "ord_once", "pay-ord_once")
    _charge(client, "ord_once", "pay-ord_once")  # the same key: replayed, one charge
    _charge(client, "ord_twice", "k1")
    _charge(client, "ord_twice", "k2")  # a fresh key: charged again
    _charge(client, "ord_refused", "pay-ord_refused")  # charged, yet the service refused it
    _charge(client, "ord_declined", None, "pm_card_chargeDeclined")  # a failed charge moves nothing
    ops = [_op("ord_once", "first", 200, "a", 1), _op("ord_once", "retry_after_timeout", 200, "a", 2),
           _op("ord_twice", "first", 503, "b", 1), _op("ord_twice", "retry_after_timeout", 200, "b", 2),
           _op("ord_refused", "first", 402, "c", 1),
           _op("ord_declined", "first", 402, "d", 1),
           _op("ord_ghost", "first", 200, "e", 1)]  # acknowledged, never charged
    parsed = config()
    result = check_ledger(ops, parsed, payment_provider.ledger.records())
    by_name = {inv.name: inv for inv in result.invariants}
    assert [v["evidence"]["key"] for v in by_name["money_moved_once"].violations] == ["ord_twice"]
    assert by_name["money_moved_once"].checked == 3
    ack = by_name["acknowledged_payment_charged"]
    assert ack.checked == 3 and [v["evidence"]["operation"]["path"] for v in ack.violations] == ["/orders/ord_ghost/pay"]
    refused = by_name["refused_not_charged"]
    assert refused.checked == 2 and len(refused.violations) == 1 and "ord_refused" in refused.violations[0]["message"]
    assert result.counts["ledger"]["charges_moved_money"] == 4 and not result.reasons
    rows = {row.key: row for row in result.rows}
    assert rows["ord_twice"].violated == ("money_moved_once",) and len(rows["ord_twice"].charges) == 2
    assert rows["ord_declined"].charges[0].state == "failed" and not rows["ord_declined"].violated
    combined = combine_ledger(ProbeCheck(invariants=[], counts={}, verdict="pass", inconclusive_reasons=[]), result)
    assert combined.verdict == "fail"
    html = render_report({"verdict": "fail", "ledger": rows_to_dicts(result.rows), "invariants": []})
    assert "The provider&#x27;s ledger" in html or "The provider's ledger" in html
    assert "ord_twice" in html and "retry_after_timeout 200" in html


def test_a_ledger_without_money_moved_is_inconclusive(payment_provider: EmbeddedProvider) -> None:
    result = check_ledger([_op("ord_x", "first", 402, "a", 1)], config(), payment_provider.ledger.records())
    assert all(inv.passed for inv in result.invariants)
    assert result.reasons and "no charge that moved money" in result.reasons[0]


def test_the_payment_provider_fixture_is_a_running_provider(payment_provider: EmbeddedProvider) -> None:
    payment_provider.add_fault(FaultRule(operation="payment_intents.create", status=500, count=1))
    client = stripe.StripeClient(KEY, base_addresses={"api": payment_provider.url}, max_network_retries=0)
    with pytest.raises(stripe.APIError):
        _charge(client, "ord_1", "k")
    charges = [r for r in payment_provider.ledger.records() if getattr(r, "record", "") == "charge"]
    assert len(charges) == 1 and charges[0].metadata == {"order_id": "ord_1"}  # charged, answered 500


def test_the_runs_provider_signs_webhooks_to_the_service_and_exports_its_ledger(tmp_path: Path) -> None:
    """ProbeProvider (harness.probe.provider.play): the spec's key and faults, events POSTed
    to the service's paths that stripe.Webhook.construct_event accepts, ledger.ndjson."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from harness.probe.provider.play import LEDGER_FILE, ProbeProvider
    from harness.provider.records import ChargeRecord, read_ledger

    received: list[tuple[str, bytes, str]] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the base class's naming
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, body, self.headers.get("Stripe-Signature", "")))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    parsed = config(webhooks=[{"path": "/hooks/stripe", "secret": "whsec_test_probe"}],
                    faults=[{"operation": "payment_intents.create", "status": 500, "count": 1}])
    assert parsed.provider is not None
    provider = ProbeProvider(parsed.provider, seed=3, run_dir=tmp_path).start(f"http://127.0.0.1:{server.server_port}")
    try:
        url = f"http://{provider.address}"
        with pytest.raises(stripe.AuthenticationError):  # only the spec's key is accepted
            _charge(stripe.StripeClient("sk_test_other", base_addresses={"api": url}, max_network_retries=0),
                    "ord_0", "k0")
        client = stripe.StripeClient(KEY, base_addresses={"api": url}, max_network_retries=0)
        with pytest.raises(stripe.APIError):  # the spec's fault: 500 after the charge
            _charge(client, "ord_1", "k1")
        records = provider.export()
    finally:
        provider.stop()
        server.shutdown()
    charges = [r for r in read_ledger(tmp_path / LEDGER_FILE) if isinstance(r, ChargeRecord)]
    assert [c.metadata["order_id"] for c in charges] == ["ord_1"] and records
    assert received and all(path == "/hooks/stripe" for path, _, _ in received)
    events = [stripe.Webhook.construct_event(body.decode(), signature, "whsec_test_probe")
              for _, body, signature in received]
    assert "payment_intent.succeeded" in {event["type"] for event in events}
