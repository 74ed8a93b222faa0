"""The deliveries real providers make, and the bad ones a receiver must refuse, as records.

A `Delivery` is one HTTP request a provider sends: the `kind` it plays (kept in the
history, so a report can say which duplicate a receiver mishandled), the event's id,
type and fact, the exact headers and body bytes, and `must_refuse`. The kinds:

- applied at most once, whatever the copies: `first`; `retry` (the same event after a
  timeout, a reset or a non-2xx: the same event id, a fresh timestamp and signature);
  `concurrent_copy` (the same event again while the first is in flight);
  `same_object_new_event` (the same object under a new event id); `out_of_order` (one
  object's events delivered against their true order, `order` saying the true place);
  `late_duplicate` (an old event id again, freshly signed, well after the first);
- refused, never applied (`must_refuse`): `stale_signature` and `future_timestamp`
  (signed beyond the tolerance, either way), `tampered_body` (signed, then changed),
  `wrong_secret`, `missing_header` (no signature header), `malformed_header` (one that
  does not parse), `unsupported_scheme` (a correct HMAC under a version a receiver must
  not accept: Stripe's `v0`).

`DeliveryPlanner` signs an `Event` (harness/webhooks/events.py) into any of these for
one scheme and secret. Not every scheme can express every refusal: a scheme that signs
no timestamp has no stale one, only Stripe has a downgrade; `refusals()` lists what
this one can make and `refused()` raises for the rest. Timestamps come from the
planner's clock at signing time, so a retry signed later carries a later timestamp.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from harness.errors import HarnessError
from harness.webhooks.events import Event
from harness.webhooks.schemes.base import DEFAULT_TOLERANCE, Scheme

FIRST = "first"
RETRY = "retry"
CONCURRENT_COPY = "concurrent_copy"
SAME_OBJECT_NEW_EVENT = "same_object_new_event"
OUT_OF_ORDER = "out_of_order"
LATE_DUPLICATE = "late_duplicate"
APPLIED_KINDS = (FIRST, RETRY, CONCURRENT_COPY, SAME_OBJECT_NEW_EVENT, OUT_OF_ORDER, LATE_DUPLICATE)

STALE_SIGNATURE = "stale_signature"
FUTURE_TIMESTAMP = "future_timestamp"
TAMPERED_BODY = "tampered_body"
WRONG_SECRET = "wrong_secret"
MISSING_HEADER = "missing_header"
MALFORMED_HEADER = "malformed_header"
UNSUPPORTED_SCHEME = "unsupported_scheme"
REFUSED_KINDS = (STALE_SIGNATURE, FUTURE_TIMESTAMP, TAMPERED_BODY, WRONG_SECRET, MISSING_HEADER,
                 MALFORMED_HEADER, UNSUPPORTED_SCHEME)
KINDS = APPLIED_KINDS + REFUSED_KINDS

# How far beyond the tolerance a stale or future signature is dated: a full tolerance
# more (at least a minute), so neither clock skew nor a slow machine makes it valid.
MIN_SKEW_MARGIN = 60


class DeliveryError(HarnessError):
    """A delivery that cannot be made: an unknown kind, or one the scheme cannot express."""


@dataclass(frozen=True)
class Delivery:
    """One request a provider sends; `headers` and `body` are exactly what goes on the wire."""

    kind: str
    event_id: str
    event_type: str
    fact: str | None
    headers: Mapping[str, str]
    body: bytes
    must_refuse: bool
    attempt: int = 1  # 1 for the first try of this delivery, 2.. for its retries
    timestamp: int | None = None  # the signed timestamp (None: the scheme signs none)
    order: int | None = None  # for out_of_order: the event's place in the true sequence
    retry_of: str | None = None  # for a retry: the kind its first try played

    def summary(self) -> dict[str, object]:
        """The fields a history record keeps (not the headers and body)."""
        return {"kind": self.kind, "event_id": self.event_id, "event_type": self.event_type, "fact": self.fact,
                "must_refuse": self.must_refuse, "attempt": self.attempt, "timestamp": self.timestamp,
                "order": self.order, "retry_of": self.retry_of}


class DeliveryPlanner:
    """Signs events into deliveries of every kind for one scheme and secret."""

    def __init__(self, scheme: Scheme, secret: str, *, tolerance: int = DEFAULT_TOLERANCE,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.time) -> None:
        scheme.check_secret(secret)
        self.scheme = scheme
        self.secret = secret
        self.tolerance = tolerance
        self.rng = rng or random.Random(0)
        self.clock = clock

    # --- deliveries a receiver must take (and apply at most once) ---------------------

    def signed(self, event: Event, kind: str, *, attempt: int = 1, order: int | None = None,
               retry_of: str | None = None) -> Delivery:
        """`event` correctly signed now, playing `kind` (one of APPLIED_KINDS)."""
        if kind not in APPLIED_KINDS:
            raise DeliveryError(f"{kind!r} is not a delivery a receiver takes (one of {', '.join(APPLIED_KINDS)})")
        timestamp = int(self.clock())
        return self._delivery(event, kind, self._sign(event, event.body, timestamp), event.body,
                              timestamp=timestamp, attempt=attempt, order=order, retry_of=retry_of)

    def first(self, event: Event) -> Delivery:
        return self.signed(event, FIRST)

    def retry(self, first: Delivery, event: Event, attempt: int) -> Delivery:
        """The `attempt`-th try (2, 3, ...) of the delivery `first` of `event`: the same id and body,
        a fresh timestamp and signature; it keeps the first try's `order` and names its kind."""
        return self.signed(event, RETRY, attempt=attempt, order=first.order, retry_of=first.kind)

    def copies(self, event: Event, count: int) -> list[Delivery]:
        """`count` deliveries of one event to send at once: the first and its concurrent copies."""
        return [self.signed(event, FIRST if index == 0 else CONCURRENT_COPY) for index in range(count)]

    def out_of_order(self, events: list[Event]) -> list[Delivery]:
        """One object's events (given in their true order) in the order to send them: reversed."""
        if len(events) < 2:
            raise DeliveryError("out_of_order needs a sequence of at least two event types")
        return [self.signed(event, OUT_OF_ORDER, order=index) for index, event in reversed(list(enumerate(events)))]

    # --- deliveries a receiver must refuse ----------------------------------------------

    def refusals(self) -> tuple[str, ...]:
        """The refused kinds this scheme (and tolerance) can express."""
        kinds = [TAMPERED_BODY, WRONG_SECRET, MISSING_HEADER, MALFORMED_HEADER]
        if self.scheme.timestamped and self.tolerance > 0:
            kinds[:0] = [STALE_SIGNATURE, FUTURE_TIMESTAMP]
        if self.scheme.downgraded(self.secret, b"", timestamp=0, event_id="probe") is not None:
            kinds.append(UNSUPPORTED_SCHEME)
        return tuple(kind for kind in REFUSED_KINDS if kind in kinds)

    def refused(self, event: Event, kind: str) -> Delivery:
        """`event` delivered as `kind`, one of `refusals()`. Give each its own fresh event, so an
        effect of its fact can only come from a receiver that applied what it should have refused."""
        if kind not in REFUSED_KINDS:
            raise DeliveryError(f"{kind!r} is not a delivery to refuse (one of {', '.join(REFUSED_KINDS)})")
        if kind not in self.refusals():
            raise DeliveryError(f"the {self.scheme.name} scheme cannot make a {kind} delivery"
                                + (" (tolerance 0)" if kind in (STALE_SIGNATURE, FUTURE_TIMESTAMP)
                                   and self.scheme.timestamped else ""))
        now = int(self.clock())
        skew = self.tolerance + max(self.tolerance, MIN_SKEW_MARGIN)
        body = event.body
        timestamp: int | None = now
        if kind == STALE_SIGNATURE:
            timestamp = now - skew
            headers = self._sign(event, body, timestamp)
        elif kind == FUTURE_TIMESTAMP:
            timestamp = now + skew
            headers = self._sign(event, body, timestamp)
        elif kind == TAMPERED_BODY:
            headers = self._sign(event, body, now)
            body = self._tampered(body)
        elif kind == WRONG_SECRET:
            other = self.scheme.new_secret(self.rng)
            while other == self.secret:
                other = self.scheme.new_secret(self.rng)
            headers = self._sign(event, body, now, secret=other)
        elif kind == MISSING_HEADER:
            headers = {name: value for name, value in self._sign(event, body, now).items()
                       if name.lower() != self.scheme.signature_header.lower()}
        elif kind == MALFORMED_HEADER:
            headers = self.scheme.malformed(self._sign(event, body, now))
        else:  # UNSUPPORTED_SCHEME
            downgraded = self.scheme.downgraded(self.secret, body, timestamp=now, event_id=event.id, topic=event.type)
            assert downgraded is not None  # refusals() offered it
            headers = {**{name: value for name, value in self._sign(event, body, now).items()
                          if name.lower() != self.scheme.signature_header.lower()}, **downgraded}
        if not self.scheme.timestamped:
            timestamp = None
        return self._delivery(event, kind, headers, body, timestamp=timestamp, must_refuse=True)

    # --- helpers --------------------------------------------------------------------------

    def _sign(self, event: Event, body: bytes, timestamp: int, *, secret: str | None = None) -> dict[str, str]:
        return self.scheme.sign(secret or self.secret, body, timestamp=timestamp, event_id=event.id, topic=event.type)

    def _tampered(self, body: bytes) -> bytes:
        """The body with one field added after signing: still valid JSON a careless receiver would act on."""
        try:
            data = json.loads(body)
        except ValueError:
            return body + b" "
        if isinstance(data, dict):
            return self.scheme.encode({**data, "harness_tampered": True})
        if isinstance(data, list):
            return self.scheme.encode([*data, "harness_tampered"])
        return body + b" "

    def _delivery(self, event: Event, kind: str, headers: Mapping[str, str], body: bytes, *,
                  timestamp: int | None, attempt: int = 1, order: int | None = None,
                  retry_of: str | None = None, must_refuse: bool = False) -> Delivery:
        return Delivery(kind=kind, event_id=event.id, event_type=event.type, fact=event.fact,
                        headers={**headers}, body=body, must_refuse=must_refuse, attempt=attempt,
                        timestamp=timestamp if self.scheme.timestamped else None, order=order,
                        retry_of=retry_of)
