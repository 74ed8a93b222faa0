"""The provider's state: PaymentIntents, Charges, Refunds, Events, and every request.

The `Ledger` is the ground truth of what moved money. Its operations (`create_intent`,
`confirm`, `capture`, `cancel`, `refund`) run under one lock, change the objects as
Stripe does, and make an Event for every state change (`payment_intent.created`,
`charge.succeeded`, `payment_intent.succeeded`, `charge.failed`,
`payment_intent.payment_failed`, `payment_intent.requires_action`,
`payment_intent.amount_capturable_updated`, `charge.captured`, `payment_intent.canceled`,
`refund.created`, `charge.refunded`), in the order the changes happen. Events are made
by harness.webhooks' `EventMaker.wrap` with the Stripe scheme, so their bodies are the
bytes a webhook delivery signs; each is handed to the `listeners` (the outbox).

A state error found once an operation runs is an `ApiError` that is stored for
replays; an unknown object is a 404 that is not (it is found before anything runs).
Ids are a prefix and 24 letters and digits from the ledger's seeded generator, so a
run with one seed and one order of requests is repeatable.
"""

from __future__ import annotations

import random
import string
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.provider.cards import DECLINED, REQUIRES_ACTION, CardOutcome, card_named
from harness.provider.errors import ApiError, invalid, missing
from harness.provider.objects import API_VERSION, Charge, PaymentIntent, Refund
from harness.provider.params import unexpected_state
from harness.provider.records import DeliveryRecord, LedgerRecord, RequestInfo, RequestRecord
from harness.provider.store import ObjectStore
from harness.webhooks.events import Event, EventMaker, EventTemplate
from harness.webhooks.schemes.stripe import SCHEME

_ALPHABET = string.ascii_letters + string.digits
CONFIRMABLE = ("requires_payment_method", "requires_confirmation", "requires_action")
CANCELABLE = ("requires_payment_method", "requires_capture", "requires_confirmation", "requires_action")


@dataclass(frozen=True)
class StoredEvent:
    event: Event
    object_id: str


class Ledger:
    def __init__(self, seed: int = 0, *, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._rng = random.Random(seed)
        self.lock = threading.RLock()
        self._maker = EventMaker(SCHEME, EventTemplate(body={}, type="provider"), random.Random(seed + 1),
                                 clock=clock)
        self.intents: dict[str, PaymentIntent] = {}
        self.charges: dict[str, Charge] = {}
        self.refunds: dict[str, Refund] = {}
        self.events: list[StoredEvent] = []
        self._events_by_id: dict[str, StoredEvent] = {}
        self.requests: list[RequestRecord] = []
        self.deliveries: list[DeliveryRecord] = []
        self.listeners: list[Callable[[Event], None]] = []
        # Customers, checkout sessions, balance transactions, the account and the objects
        # adopted from webhook events (harness.provider.store); its own seed, so the ids of
        # the money-moving objects per seed are what they were before it existed.
        self.store = ObjectStore()
        self.account_id = "acct_" + "".join(random.Random(seed + 2).choice(_ALPHABET) for _ in range(16))

    # --- ids and time -----------------------------------------------------------------

    def new_id(self, prefix: str) -> str:
        with self.lock:
            return prefix + "".join(self._rng.choice(_ALPHABET) for _ in range(24))

    def now(self) -> int:
        return int(self.clock())

    # --- lookups (404s are found before anything runs: not stored) ---------------------

    def intent(self, ident: str, param: str = "intent") -> PaymentIntent:
        with self.lock:
            found = self.intents.get(ident)
        if found is None:
            raise missing("payment_intent", ident, param)
        return found

    def charge(self, ident: str, param: str = "charge") -> Charge:
        with self.lock:
            found = self.charges.get(ident)
        if found is None:
            raise missing("charge", ident, param)
        return found

    def refund_named(self, ident: str) -> Refund:
        with self.lock:
            found = self.refunds.get(ident)
        if found is None:
            raise missing("refund", ident)
        return found

    def event(self, ident: str) -> StoredEvent:
        with self.lock:
            found = self._events_by_id.get(ident)
        if found is None:
            raise missing("event", ident)
        return found

    def stored_object(self, object_type: str, ident: str, param: str = "id") -> dict[str, Any]:
        """A JSON object of the store (a customer, an adopted object, ...); 404 when unknown."""
        with self.lock:
            found = self.store.get(object_type, ident)
        if found is None:
            raise missing(object_type, ident, param)
        return found

    def find_json(self, ident: str) -> dict[str, Any] | None:
        """Any object by id, as the API answers it (what `expand` puts in place of an id)."""
        with self.lock:
            if ident in self.intents:
                return self.intents[ident].to_api()
            if ident in self.charges:
                return self.charges[ident].to_api()
            if ident in self.refunds:
                return self.refunds[ident].to_api()
            return self.store.find(ident)

    def adopt_event_objects(self, body: Any) -> int:
        """Keep what a webhook event made elsewhere names (the event itself and its
        `data.object`), so a receiver that fetches them gets them; how many were new.
        Objects the ledger made itself are never replaced."""
        with self.lock:
            kept = 0
            if isinstance(body, dict) and isinstance(body.get("id"), str) and body["id"] not in self._events_by_id:
                kept += self.store.adopt(body)
            data = body.get("data") if isinstance(body, dict) else None
            obj = data.get("object") if isinstance(data, dict) else None
            if isinstance(obj, dict) and self.find_json(str(obj.get("id"))) is None:
                kept += self.store.adopt(obj)
            return kept

    # --- rendering ----------------------------------------------------------------------

    def intent_json(self, intent: PaymentIntent, expand: frozenset[str] = frozenset()) -> dict[str, Any]:
        with self.lock:
            return self.expanded(intent.to_api(), expand)

    def charge_json(self, charge: Charge, expand: frozenset[str] = frozenset()) -> dict[str, Any]:
        with self.lock:
            return self.expanded(charge.to_api(), expand)

    def refund_json(self, refund: Refund, expand: frozenset[str] = frozenset()) -> dict[str, Any]:
        with self.lock:
            return self.expanded(refund.to_api(), expand)

    def expanded(self, obj: dict[str, Any], expand: frozenset[str] | tuple[str, ...]) -> dict[str, Any]:
        """`obj` with each `expand` path (`latest_charge`, `latest_charge.balance_transaction`)
        replaced by the object its id names, as Stripe's `expand[]` does; an id the provider
        does not hold, or null, stays as it is. The paths were checked by the route."""
        with self.lock:
            for path in sorted(expand):
                self._expand_path(obj, path.split("."))
            return obj

    def _expand_path(self, obj: dict[str, Any], names: list[str]) -> None:
        value = obj.get(names[0])
        if isinstance(value, str):
            found = self.find_json(value)
            if found is None:
                return
            obj[names[0]] = value = found
        if isinstance(value, dict) and len(names) > 1:
            self._expand_path(value, names[1:])

    # --- operations ---------------------------------------------------------------------

    def create_intent(self, *, amount: int, currency: str, capture_method: str, metadata: dict[str, str],
                      description: str | None, card: CardOutcome | None, confirm: bool,
                      request: RequestInfo) -> PaymentIntent:
        with self.lock:
            ident = self.new_id("pi_")
            intent = PaymentIntent(id=ident, amount=amount, currency=currency, capture_method=capture_method,
                                   created=self.now(), client_secret=f"{ident}_secret_{self.new_id('')}",
                                   metadata=metadata, description=description,
                                   payment_method=card.payment_method if card else None,
                                   status="requires_confirmation" if card else "requires_payment_method")
            self.intents[ident] = intent
            self._emit("payment_intent.created", intent.to_api(), ident, request)
            if confirm:
                self.confirm(intent, card, request)
            return intent

    def confirm(self, intent: PaymentIntent, card: CardOutcome | None, request: RequestInfo, *,
                capture_method: str | None = None) -> PaymentIntent:
        """Confirm with `card` (or the one attached); a decline raises the stored 402."""
        with self.lock:
            if intent.status not in CONFIRMABLE:
                raise unexpected_state(f"This PaymentIntent's status is {intent.status}, but it must be one of "
                                       f"{', '.join(CONFIRMABLE)} to be confirmed.")
            if capture_method is not None:
                intent.capture_method = capture_method
            if card is not None:
                intent.payment_method = card.payment_method
            if card is None:
                if intent.payment_method is None:
                    raise invalid("You cannot confirm this PaymentIntent because it's missing a payment method. "
                                  "Update it with a payment_method and try again.", param="payment_method",
                                  code="payment_intent_unexpected_state", stored=True)
                card = card_named(intent.payment_method)
                assert card is not None  # only known cards are ever attached
            intent.next_action = None
            if card.result == REQUIRES_ACTION:
                intent.status = "requires_action"
                intent.next_action = {"type": "use_stripe_sdk", "use_stripe_sdk": {"type": "three_d_secure_redirect"}}
                self._emit("payment_intent.requires_action", intent.to_api(), intent.id, request)
                return intent
            charge = Charge(id=self.new_id("ch_"), payment_intent=intent.id, amount=intent.amount,
                            currency=intent.currency, created=self.now(), metadata=dict(intent.metadata),
                            payment_method=card.payment_method, brand=card.brand, last4=card.last4,
                            request=request)
            self.charges[charge.id] = charge
            intent.charges.append(charge.id)
            intent.latest_charge = charge.id
            if card.result == DECLINED:
                return self._decline(intent, charge, card, request)
            intent.last_payment_error = None
            if intent.capture_method == "manual":
                intent.status = "requires_capture"
                intent.amount_capturable = intent.amount
                self._emit("charge.succeeded", charge.to_api(), charge.id, request)
                self._emit("payment_intent.amount_capturable_updated", intent.to_api(), intent.id, request)
            else:
                charge.captured = True
                charge.amount_captured = intent.amount
                charge.balance_transaction = self._balance_transaction(charge.id, intent.amount, charge.currency,
                                                                       "charge")
                intent.status = "succeeded"
                intent.amount_received = intent.amount
                self._emit("charge.succeeded", charge.to_api(), charge.id, request)
                self._emit("payment_intent.succeeded", intent.to_api(), intent.id, request)
            return intent

    def _decline(self, intent: PaymentIntent, charge: Charge, card: CardOutcome, request: RequestInfo) -> PaymentIntent:
        charge.status = "failed"
        charge.failure_code = card.code
        charge.failure_message = card.message
        charge.decline_code = card.decline_code
        error = {"type": "card_error", "code": card.code, "decline_code": card.decline_code,
                 "message": card.message, "charge": charge.id,
                 "payment_method": {"id": card.payment_method, "object": "payment_method", "type": "card"}}
        intent.last_payment_error = error
        intent.payment_method = None
        intent.status = "requires_payment_method"
        self._emit("charge.failed", charge.to_api(), charge.id, request)
        self._emit("payment_intent.payment_failed", intent.to_api(), intent.id, request)
        raise ApiError(402, "card_error", card.message, code=card.code,
                       extra={"decline_code": card.decline_code, "charge": charge.id,
                              "payment_intent": intent.to_api(),
                              "payment_method": error["payment_method"]})

    def capture(self, intent: PaymentIntent, amount: int | None, request: RequestInfo, *,
                metadata: dict[str, str] | None = None) -> PaymentIntent:
        with self.lock:
            if intent.status != "requires_capture":
                raise unexpected_state(f"This PaymentIntent could not be captured because it has a status of "
                                       f"{intent.status}. Only a PaymentIntent with one of the following "
                                       "statuses may be captured: requires_capture.")
            amount = intent.amount_capturable if amount is None else amount
            if amount > intent.amount_capturable:
                raise invalid(f"The amount to capture ({amount}) is greater than the amount capturable "
                              f"({intent.amount_capturable}).", param="amount_to_capture", code="amount_too_large",
                              stored=True)
            assert intent.latest_charge is not None
            intent.metadata.update(metadata or {})
            charge = self.charges[intent.latest_charge]
            charge.captured = True
            charge.amount_captured = amount
            charge.balance_transaction = self._balance_transaction(charge.id, amount, charge.currency, "charge")
            intent.amount_received = amount
            intent.amount_capturable = 0
            intent.status = "succeeded"
            self._emit("charge.captured", charge.to_api(), charge.id, request)
            self._emit("payment_intent.succeeded", intent.to_api(), intent.id, request)
            return intent

    def cancel(self, intent: PaymentIntent, reason: str | None, request: RequestInfo) -> PaymentIntent:
        with self.lock:
            if intent.status not in CANCELABLE:
                raise unexpected_state(f"You cannot cancel this PaymentIntent because it has a status of "
                                       f"{intent.status}. Only a PaymentIntent with one of the following statuses "
                                       f"may be canceled: {', '.join(CANCELABLE)}.")
            if intent.status == "requires_capture" and intent.latest_charge:
                self.charges[intent.latest_charge].released = True
            intent.status = "canceled"
            intent.amount_capturable = 0
            intent.canceled_at = self.now()
            intent.cancellation_reason = reason
            self._emit("payment_intent.canceled", intent.to_api(), intent.id, request)
            return intent

    def refund(self, charge: Charge, amount: int | None, reason: str | None, metadata: dict[str, str],
               request: RequestInfo) -> Refund:
        with self.lock:
            if charge.status != "succeeded" or not charge.captured or charge.released:
                raise invalid(f"Charge {charge.id} has no captured payment to refund.", code="charge_not_refundable",
                              stored=True)
            remaining = charge.amount_captured - charge.amount_refunded
            if remaining <= 0:
                raise invalid(f"Charge {charge.id} has already been refunded.", code="charge_already_refunded",
                              stored=True)
            amount = remaining if amount is None else amount
            if amount > remaining:
                raise invalid(f"Refund amount ({amount}) is greater than unrefunded amount on charge ({remaining})",
                              param="amount", code="amount_too_large", stored=True)
            refund = Refund(id=self.new_id("re_"), charge=charge.id, payment_intent=charge.payment_intent,
                            amount=amount, currency=charge.currency, created=self.now(), metadata=metadata,
                            reason=reason, request=request)
            refund.balance_transaction = self._balance_transaction(refund.id, -amount, refund.currency, "refund")
            self.refunds[refund.id] = refund
            charge.amount_refunded += amount
            charge.refunds.append(refund.id)
            self._emit("refund.created", refund.to_api(), refund.id, request)
            self._emit("charge.refunded", charge.to_api(), charge.id, request)
            return refund

    def _balance_transaction(self, source: str, amount: int, currency: str, kind: str) -> str:
        """The balance transaction of money that moved (a capture, a refund: negative); no fees."""
        created = self.now()
        ident = self.new_id("txn_")
        self.store.put({"id": ident, "object": "balance_transaction", "amount": amount, "available_on": created,
                        "created": created, "currency": currency, "description": None, "exchange_rate": None,
                        "fee": 0, "fee_details": [], "net": amount, "reporting_category": kind, "source": source,
                        "status": "available", "type": kind})
        return ident

    # --- the record -----------------------------------------------------------------------

    def log_request(self, record: RequestRecord) -> None:
        with self.lock:
            self.requests.append(record)

    def log_delivery(self, record: DeliveryRecord) -> None:
        with self.lock:
            self.deliveries.append(record)

    def records(self) -> list[LedgerRecord]:
        """Charges, refunds, requests and webhook deliveries, each in the order they happened."""
        with self.lock:
            return [*(charge.record() for charge in self.charges.values()),
                    *(refund.record() for refund in self.refunds.values()),
                    *self.requests, *self.deliveries]

    def _emit(self, event_type: str, obj: dict[str, Any], object_id: str, request: RequestInfo) -> None:
        data = {"api_version": API_VERSION, "data": {"object": obj},
                "request": {"id": request.request_id, "idempotency_key": request.idempotency_key}}
        event = self._maker.wrap(data, event_type)
        stored = StoredEvent(event, object_id)
        self.events.append(stored)
        self._events_by_id[event.id] = stored
        for listener in list(self.listeners):
            listener(event)
