"""A `provider.key_by` that none of the provider's charges has is the config's mistake:
a one-line `ProbeConfigError` naming the field (the CLI's exit 2), not an inconclusive
run blamed on a service that charged fine (harness.probe.ledger_checks)."""

from __future__ import annotations

from typing import Any

import pytest
import stripe

from harness.errors import HarnessError
from harness.probe.config import ProbeConfigError, parse_config
from harness.probe.ledger_checks import check_ledger
from harness.provider.server import EmbeddedProvider

PAY = {"name": "pay", "path": "/orders/ord_{uuid}/pay", "requires_key": False,
       "body": {"amount": "{int:100-999}", "currency": "eur"}, "id": {"pointer": "/order_id"}}
SERVICE = {"command": ["app", "--port", "{port}"], "env": {"STRIPE_API_BASE": "{provider.url}"}}


def config(**provider: Any) -> Any:
    return parse_config({"endpoints": [PAY], "service": SERVICE, "provider": provider}, source="probe.yaml")


def test_a_key_by_no_charge_has_is_a_config_error_naming_the_field(payment_provider: EmbeddedProvider) -> None:
    client = stripe.StripeClient("sk_test_probe", base_addresses={"api": payment_provider.url},
                                 max_network_retries=0)
    client.v1.payment_intents.create(params={"amount": 500, "currency": "eur", "payment_method": "pm_card_visa",
                                             "confirm": True, "metadata": {"order_id": "ord_1"}})
    op = {"op": "create_order", "endpoint": "pay", "type": "ok", "status": 200, "idempotency_key": "k",
          "path": "/orders/ord_1/pay", "body": {"amount": 500}, "invoke_time": 1.0, "complete_time": 1.1}
    records = payment_provider.ledger.records()
    with pytest.raises(ProbeConfigError) as caught:
        check_ledger([op], config(key_by="/metadata/order"), records)
    message = str(caught.value)
    assert isinstance(caught.value, HarnessError) and "\n" not in message
    assert message.startswith("probe.yaml: provider.key_by: /metadata/order is in none of the 1 charges"), message
    assert "/metadata/order_id" in message
    # The right pointer judges the same ledger.
    assert check_ledger([op], config(key_by="/metadata/order_id"), records).reasons == []
