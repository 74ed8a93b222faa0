"""Events made from a template, the way a provider makes them.

An `EventTemplate` is a JSON body template (with the body generators of
harness/generators.py: `{uuid}`, `{int:A-B}`, `{choice:a|b}`), the event type, the JSON
pointer of the business fact that must take effect once (e.g. `/data/object/id`), and
optionally the event types of one object's life in their true order (`sequence`).

`EventMaker` renders it into `Event`s: a fresh id in the scheme's format, the scheme's
envelope around the rendered template, the exact body bytes that get signed, and the
fact read from the body. `same_object(event)` is the same business object under a new
event id (Stripe documents that it sometimes makes two events for one change);
`sequence()` is one object's events in their true order, for out-of-order deliveries;
`wrap(data, type)` an event around content the caller made (a payment provider's
ledger objects), so the provider's webhooks are signed and delivered the same way.
Ids and values come from the caller's seeded `random.Random`, so a run is repeatable.
`on_event`, when given, is told every event made (before it is sent): how a payment
provider run beside the probe learns the objects the probe's events name
(harness.provider's `Ledger.adopt_event_objects`), so a receiver that fetches one gets it.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError
from harness.generators import render_body
from harness.webhooks.schemes.base import Scheme


class EventError(HarnessError):
    """An event template that cannot make events (the fact is not in the body, ...)."""


@dataclass(frozen=True)
class EventTemplate:
    body: Any
    type: str
    fact: str = ""  # a JSON pointer into the event body as sent; "" = no fact
    sequence: tuple[str, ...] = ()  # one object's event types in their true order


@dataclass(frozen=True)
class Event:
    """One event as the provider holds it: what every delivery of it carries."""

    id: str
    type: str
    created: int  # unix seconds
    body: bytes  # exactly the bytes that are signed and sent
    fact: str | None  # the value at the template's fact pointer, as text

    def data(self) -> Any:
        """The body, parsed."""
        return json.loads(self.body)


EventListener = Callable[[Event], None]


class EventMaker:
    """Makes the events of one template for one scheme."""

    def __init__(self, scheme: Scheme, template: EventTemplate, rng: random.Random, *,
                 clock: Callable[[], float] = time.time, on_event: EventListener | None = None) -> None:
        self.scheme = scheme
        self.template = template
        self.rng = rng
        self.clock = clock
        self.on_event = on_event

    def event(self, event_type: str | None = None) -> Event:
        """A new event about a new object (fresh generated values)."""
        return self.wrap(render_body(self.template.body, self.rng, key=None), event_type or self.template.type)

    def same_object(self, event: Event, event_type: str | None = None) -> Event:
        """Another event (a new id, now) about the same object as `event`."""
        return self.wrap(event.data(), event_type or event.type)

    def wrap(self, data: Any, event_type: str, *, event_id: str | None = None, created: int | None = None) -> Event:
        """An event around given content (e.g. a payment provider's own object, `{"data": {"object": ...}}`)
        in the scheme's envelope; the id is fresh and `created` is now unless given."""
        return self._make(data, event_type, event_id=event_id, created=created)

    def sequence(self) -> list[Event]:
        """One new object's events in their true order (`template.sequence`, else just its type)."""
        types = self.template.sequence or (self.template.type,)
        first = self.event(types[0])
        return [first, *(self.same_object(first, event_type) for event_type in types[1:])]

    def _make(self, data: Any, event_type: str, *, event_id: str | None = None, created: int | None = None) -> Event:
        event_id = event_id or self.scheme.new_event_id(self.rng)
        created = int(self.clock()) if created is None else created
        body = self.scheme.encode(self.scheme.envelope(data, event_id=event_id, event_type=event_type,
                                                       created=created))
        fact = None
        if self.template.fact:
            value = resolve_pointer(json.loads(body), self.template.fact)
            if value is _MISSING:
                raise EventError(f"fact: {self.template.fact} is not in the {self.scheme.name} event body")
            fact = value if isinstance(value, str) else json.dumps(value)
        event = Event(id=event_id, type=event_type, created=created, body=body, fact=fact)
        if self.on_event is not None:
            self.on_event(event)
        return event


_MISSING: Any = object()


def resolve_pointer(document: Any, pointer: str) -> Any:
    """The value at a JSON pointer (RFC 6901), or `_MISSING` when there is none."""
    if pointer == "":
        return document
    if not pointer.startswith("/"):
        return _MISSING
    value = document
    for token in pointer[1:].split("/"):
        name = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and name in value:
            value = value[name]
        elif isinstance(value, list) and name.isdigit() and int(name) < len(value):
            value = value[int(name)]
        else:
            return _MISSING
    return value
