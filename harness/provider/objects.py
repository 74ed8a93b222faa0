"""The ledger's objects (PaymentIntent, Charge, Refund) and their JSON in Stripe's shapes.

Each is a mutable dataclass the ledger changes under its lock; `to_api()` renders the
object as Stripe's API answers it (`id`, `object`, integer amounts in the currency's
minor unit, `created` in Unix seconds, `livemode: false`, `metadata` as strings), with
the fields a checkout integration reads. Related objects are ids; the ledger puts the objects in
place of the ids a request's `expand[]` names (`Ledger.expanded`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.provider.records import (
    AUTHORIZED,
    CANCELED,
    FAILED,
    PARTIALLY_REFUNDED,
    REFUNDED,
    SUCCEEDED,
    ChargeRecord,
    RefundRecord,
    RequestInfo,
)

API_VERSION = "2026-10-28.endive"  # the version the pinned stripe-python sends


@dataclass
class PaymentIntent:
    id: str
    amount: int
    currency: str
    capture_method: str
    created: int
    client_secret: str
    metadata: dict[str, str]
    description: str | None = None
    payment_method: str | None = None
    status: str = "requires_payment_method"
    amount_capturable: int = 0
    amount_received: int = 0
    latest_charge: str | None = None
    last_payment_error: dict[str, Any] | None = None
    next_action: dict[str, Any] | None = None
    canceled_at: int | None = None
    cancellation_reason: str | None = None
    charges: list[str] = field(default_factory=list)

    def to_api(self) -> dict[str, Any]:
        return {
            "id": self.id, "object": "payment_intent", "amount": self.amount,
            "amount_capturable": self.amount_capturable, "amount_details": {"tip": {}},
            "amount_received": self.amount_received, "application": None, "application_fee_amount": None,
            "automatic_payment_methods": None, "canceled_at": self.canceled_at,
            "cancellation_reason": self.cancellation_reason, "capture_method": self.capture_method,
            "client_secret": self.client_secret, "confirmation_method": "automatic", "created": self.created,
            "currency": self.currency, "customer": None, "description": self.description,
            "last_payment_error": self.last_payment_error,
            "latest_charge": self.latest_charge,
            "livemode": False, "metadata": dict(self.metadata), "next_action": self.next_action,
            "on_behalf_of": None, "payment_method": self.payment_method,
            "payment_method_options": {"card": {"request_three_d_secure": "automatic"}},
            "payment_method_types": ["card"], "processing": None, "receipt_email": None, "review": None,
            "setup_future_usage": None, "shipping": None, "statement_descriptor": None,
            "statement_descriptor_suffix": None, "status": self.status, "transfer_data": None,
            "transfer_group": None,
        }


@dataclass
class Charge:
    id: str
    payment_intent: str
    amount: int
    currency: str
    created: int
    metadata: dict[str, str]
    payment_method: str
    brand: str
    last4: str
    request: RequestInfo
    status: str = "succeeded"  # succeeded | failed (Stripe's charge status)
    captured: bool = False
    amount_captured: int = 0
    amount_refunded: int = 0  # by refunds only (a released authorization is `released`)
    released: bool = False  # an uncaptured authorization canceled
    failure_code: str | None = None
    failure_message: str | None = None
    decline_code: str | None = None
    refunds: list[str] = field(default_factory=list)
    balance_transaction: str | None = None  # made when captured (harness.provider.ledger)
    description: str | None = None

    @property
    def refunded(self) -> bool:
        return self.released or (self.captured and self.amount_refunded >= self.amount_captured)

    @property
    def state(self) -> str:
        if self.status == "failed":
            return FAILED
        if self.released:
            return CANCELED
        if not self.captured:
            return AUTHORIZED
        if self.amount_refunded >= self.amount_captured:
            return REFUNDED
        return PARTIALLY_REFUNDED if self.amount_refunded else SUCCEEDED

    def record(self) -> ChargeRecord:
        return ChargeRecord(id=self.id, payment_intent=self.payment_intent, amount=self.amount,
                            amount_captured=self.amount_captured, amount_refunded=self.amount_refunded,
                            currency=self.currency, metadata=dict(self.metadata),
                            payment_method=self.payment_method, state=self.state, failure_code=self.failure_code,
                            created=self.created, request=self.request)

    def to_api(self) -> dict[str, Any]:
        succeeded = self.status == "succeeded"
        return {
            "id": self.id, "object": "charge", "amount": self.amount, "amount_captured": self.amount_captured,
            "amount_refunded": self.amount_refunded + (self.amount if self.released else 0),
            "application": None, "application_fee_amount": None,
            "balance_transaction": self.balance_transaction, "billing_details": {"address": None, "email": None, "name": None, "phone": None},
            "captured": self.captured, "created": self.created, "currency": self.currency, "customer": None,
            "description": self.description, "disputed": False, "failure_code": self.failure_code,
            "failure_message": self.failure_message, "livemode": False, "metadata": dict(self.metadata),
            "outcome": {
                "network_status": "approved_by_network" if succeeded else "declined_by_network",
                "reason": self.decline_code, "risk_level": "normal",
                "seller_message": "Payment complete." if succeeded else "The bank did not return any further "
                "details with this decline.",
                "type": "authorized" if succeeded else "issuer_declined",
            },
            "paid": succeeded,
            "payment_intent": self.payment_intent, "payment_method": self.payment_method,
            "payment_method_details": {"type": "card", "card": {"brand": self.brand, "last4": self.last4,
                                                                "country": "US", "funding": "credit"}},
            "receipt_url": None, "refunded": self.refunded, "status": self.status,
        }


@dataclass
class Refund:
    id: str
    charge: str
    payment_intent: str
    amount: int
    currency: str
    created: int
    metadata: dict[str, str]
    reason: str | None
    request: RequestInfo
    balance_transaction: str | None = None

    def record(self) -> RefundRecord:
        return RefundRecord(id=self.id, charge=self.charge, payment_intent=self.payment_intent, amount=self.amount,
                            currency=self.currency, metadata=dict(self.metadata), created=self.created,
                            request=self.request)

    def to_api(self) -> dict[str, Any]:
        return {
            "id": self.id, "object": "refund", "amount": self.amount,
            "balance_transaction": self.balance_transaction,
            "charge": self.charge, "created": self.created,
            "currency": self.currency, "metadata": dict(self.metadata),
            "payment_intent": self.payment_intent,
            "reason": self.reason, "receipt_number": None, "source_transfer_reversal": None,
            "status": "succeeded", "transfer_reversal": None,
        }
