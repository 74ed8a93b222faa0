"""The probe's own webhook events name objects (`pi_{uuid}`) that a receiver may fetch from
the payment provider the probe runs (`{provider.url}`): WebhookPlay tells the provider every
event it makes (`on_event`, the runner wires ProbeProvider.adopt_event), so the receiver
gets each object, never a 404."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import stripe

from harness.probe.config import parse_config
from harness.probe.provider.play import ProbeProvider
from harness.probe.provider.spec import ProviderSpec
from harness.probe.webhooks.play import WebhookPlay

ENTRY = {"name": "stripe", "path": "/webhooks/stripe", "scheme": "stripe", "secret": "whsec_test_123",
         "event": {"type": "payment_intent.succeeded",
                   "data": {"object": {"id": "pi_{uuid}", "object": "payment_intent", "amount": "{int:100-999}"}}},
         "fact": "/data/object/id", "timeout": "2s",
         "effects": {"dsn": "sqlite:///unused.db", "query": "SELECT 1 WHERE :fact = ''"}}


@pytest.fixture
def run_provider(tmp_path: Path) -> Iterator[ProbeProvider]:
    provider = ProbeProvider(ProviderSpec(), seed=5, run_dir=tmp_path).start()
    try:
        yield provider
    finally:
        provider.stop()


def fetching_receiver(provider_url: str, seen: list[tuple[str, int]]) -> ThreadingHTTPServer:
    """A receiver that, like dj-stripe, fetches the object each event names from the provider."""
    client = stripe.StripeClient("sk_test_probe", base_addresses={"api": provider_url}, max_network_retries=0)

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the base class's naming
            event = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            ident = event.get("data", {}).get("object", {}).get("id")
            status = 200
            if ident:
                try:
                    client.v1.payment_intents.retrieve(ident)
                except stripe.StripeError as error:
                    status = error.http_status or 500
                seen.append((ident, status))
            self.send_response(200 if status == 200 else 500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("adopt", [True, False])
def test_a_receiver_fetching_the_events_object_finds_it(tmp_path: Path, run_provider: ProbeProvider,
                                                          adopt: bool) -> None:
    seen: list[tuple[str, int]] = []
    server = fetching_receiver(f"http://{run_provider.address}", seen)
    config = parse_config({"upstream": f"127.0.0.1:{server.server_port}", "webhooks": [ENTRY],
                           "load": {"duration": "1s"}}, source="test")
    try:
        with WebhookPlay(config.webhooks, tmp_path, seed=1, nonce="t", duration=1.0,
                         on_event=run_provider.adopt_event if adopt else None) as play:
            play.start(f"http://127.0.0.1:{server.server_port}")
            threading.Event().wait(1.0)
            play.stop()
    finally:
        server.shutdown()
    assert seen, "no event reached the receiver"
    statuses = {status for _, status in seen}
    # The control (no adoption) is what a receiver got before: a 404 for every object.
    assert statuses == ({200} if adopt else {404}), seen
