"""A webhook endpoint's configuration: YAML → a checked `WebhookSpec`.

    webhooks:
      - name: stripe-events              # optional; webhook-<i> by default
        path: /webhooks/stripe           # where the receiver listens (through the probe's proxy)
        scheme: stripe                   # stripe | standard | github | shopify
        secret: whsec_test_123           # the receiver's signing secret
        tolerance: 300                   # seconds the receiver should accept either way (0: none)
        event:                           # the template; `type` is the event type, the rest the body
          type: payment_intent.succeeded
          data: {object: {id: "pi_{uuid}", amount: "{int:100-99999}", currency: eur}}
        fact: /data/object/id            # JSON pointer (into the body as sent) to the business fact
        sequence: [payment_intent.created, payment_intent.succeeded]   # optional: true order
        timeout: 10s                     # the provider's wait for an answer before it retries

`parse_webhook(where, raw, path)` checks one entry with the caller's `FieldChecker`, so
every error is the caller's exception naming the source and the field
(`probe.yaml: webhooks[0].secret: standard: the secret must start with whsec_ ...`).
Keys it does not own (the probe's `effects`) are passed in `also` and left to the
caller. The fact is checked on a rendered sample: it must be in the body as the scheme
sends it, and generated (different per event), so each event's effect can be told
apart. `WebhookSpec.to_raw()` gives back the YAML form, which parses to the same spec.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError
from harness.fieldcheck import FieldChecker
from harness.webhooks.deliveries import DeliveryPlanner
from harness.webhooks.events import EventError, EventMaker, EventTemplate
from harness.webhooks.schemes import SCHEME_NAMES, scheme_named
from harness.webhooks.schemes.base import DEFAULT_TOLERANCE, Scheme
from harness.webhooks.sender import DEFAULT_TIMEOUT, RetrySchedule, Sender, WebhookProvider

KEYS = ("name", "path", "scheme", "secret", "tolerance", "event", "fact", "sequence", "timeout")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_TYPE = re.compile(r"^[A-Za-z0-9_./:-]{1,128}$")


@dataclass(frozen=True)
class WebhookSpec:
    name: str
    path: str
    scheme: str
    secret: str
    event: EventTemplate
    tolerance: int = DEFAULT_TOLERANCE
    timeout: float = DEFAULT_TIMEOUT

    def signer(self) -> Scheme:
        return scheme_named(self.scheme)

    def provider(self, base_url: str, *, rng: random.Random, schedule: RetrySchedule | None = None,
                 clock: Callable[[], float] = time.time) -> WebhookProvider:
        """The provider that plays this endpoint's deliveries to `<base_url><path>` (the probe's proxy)."""
        scheme = self.signer()
        maker = EventMaker(scheme, self.event, rng, clock=clock)
        planner = DeliveryPlanner(scheme, self.secret, tolerance=self.tolerance, rng=rng, clock=clock)
        sender = Sender(base_url, self.path, timeout=self.timeout, user_agent=scheme.user_agent)
        return WebhookProvider(maker, planner, sender, schedule=schedule)

    def to_raw(self) -> dict[str, Any]:
        """The YAML form (`parse_webhook` reads it back to an equal spec)."""
        body = self.event.body if isinstance(self.event.body, dict) else {}
        raw: dict[str, Any] = {"name": self.name, "path": self.path, "scheme": self.scheme, "secret": self.secret,
                               "tolerance": self.tolerance, "event": {"type": self.event.type, **body},
                               "fact": self.event.fact, "timeout": self.timeout}
        if self.event.sequence:
            raw["sequence"] = list(self.event.sequence)
        return raw


def parse_webhook(where: FieldChecker, raw: Any, path: str, *, also: Sequence[str] = ()) -> WebhookSpec:
    """One `webhooks:` entry, checked; `path` names it in errors (e.g. `webhooks[0]`)."""
    item = where.mapping(raw, path, required=("path", "scheme", "secret", "event", "fact"),
                         optional=(*(key for key in KEYS if key not in ("path", "scheme", "secret", "event", "fact")),
                                   *also))
    index = path.rpartition("[")[2].rstrip("]")
    name = item.get("name", f"webhook-{index}" if index.isdigit() else "webhook")
    if not isinstance(name, str) or not _NAME.match(name):
        raise where.error(f"{path}.name", f"must be letters, digits, '.', '_' or '-', not {name!r}")
    url_path = item["path"]
    if not isinstance(url_path, str) or not url_path.startswith("/") or any(c.isspace() for c in url_path):
        raise where.error(f"{path}.path", f"must be a URL path starting with /, not {url_path!r}")
    scheme_name = item["scheme"]
    if scheme_name not in SCHEME_NAMES:
        raise where.error(f"{path}.scheme", f"must be one of {', '.join(SCHEME_NAMES)}, not {scheme_name!r}")
    scheme = scheme_named(scheme_name)
    secret = item["secret"]
    if not isinstance(secret, str):
        raise where.error(f"{path}.secret", "must be a string")
    try:
        scheme.check_secret(secret)
    except HarnessError as error:
        raise where.error(f"{path}.secret", str(error)) from None
    tolerance_raw = item.get("tolerance", DEFAULT_TOLERANCE)
    tolerance = where.duration(tolerance_raw, f"{path}.tolerance")
    if tolerance < 0 or tolerance != int(tolerance):
        raise where.error(f"{path}.tolerance", f"must be whole seconds >= 0, not {tolerance_raw!r}")
    timeout = where.duration(item.get("timeout", DEFAULT_TIMEOUT), f"{path}.timeout")
    if timeout <= 0:
        raise where.error(f"{path}.timeout", "must be longer than 0s")
    event = where.mapping(item["event"], f"{path}.event", required=("type",),
                          optional=tuple(key for key in item["event"] if key != "type")
                          if isinstance(item["event"], dict) else ())
    event_type = _event_type(where, event["type"], f"{path}.event.type")
    body = {key: value for key, value in event.items() if key != "type"}
    if "{key}" in repr(body):
        raise where.error(f"{path}.event", "{key} means a request's Idempotency-Key; a webhook has none "
                          "(use {uuid}, {int:A-B} or {choice:a|b})")
    sequence = _sequence(where, item.get("sequence"), f"{path}.sequence")
    fact = item["fact"]
    if not isinstance(fact, str) or not fact.startswith("/"):
        raise where.error(f"{path}.fact", f"must be a JSON pointer like /data/object/id, not {fact!r}")
    template = EventTemplate(body=body, type=event_type, fact=fact, sequence=sequence)
    _check_fact(where, scheme, template, f"{path}.fact")
    return WebhookSpec(name=name, path=url_path, scheme=scheme_name, secret=secret, event=template,
                       tolerance=int(tolerance), timeout=timeout)


def _event_type(where: FieldChecker, raw: Any, path: str) -> str:
    if not isinstance(raw, str) or not _TYPE.match(raw):
        raise where.error(path, f"must be an event type like payment_intent.succeeded, not {raw!r}")
    return raw


def _sequence(where: FieldChecker, raw: Any, path: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) < 2:
        raise where.error(path, "must be a list of at least two event types in their true order")
    types = tuple(_event_type(where, value, f"{path}[{i}]") for i, value in enumerate(raw))
    if len(set(types)) != len(types):
        raise where.error(path, "names an event type twice")
    return types


def _check_fact(where: FieldChecker, scheme: Scheme, template: EventTemplate, path: str) -> None:
    """The fact is in the body as sent, and differs between two events (it is generated)."""
    facts = []
    for seed in range(4):  # four samples: a narrow {int:A-B} may repeat once by chance
        try:
            facts.append(EventMaker(scheme, template, random.Random(seed), clock=lambda: 0.0).event().fact)
        except EventError:
            raise where.error(path, f"{template.fact} is not in the {scheme.name} event body") from None
        except HarnessError as error:
            raise where.error(path.rpartition(".")[0] + ".event", str(error)) from None
    if len(set(facts)) == 1:
        raise where.error(path, f"{template.fact} must be generated ({{uuid}}, {{int:A-B}}, ...) in event, "
                          "so that each event has its own fact")
