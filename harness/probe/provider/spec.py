"""The probe config's `provider:` section, parsed and checked.

    provider:
      kind: stripe                    # the only kind: harness.provider, Stripe-compatible
      key_by: /metadata/order_id      # a JSON pointer into a ledger charge: the business key
      api_key: sk_test_probe          # optional: the only secret key the provider accepts
      webhooks:                       # optional: the service's receivers of signed events
        - path: /webhooks/stripe
          secret: whsec_test_probe
          name: stripe                # optional (provider-webhook-<i>)
          scheme: stripe              # optional; the only scheme the provider signs with
          timeout: 10s                # optional: the provider's wait for an answer before it retries
          tolerance: 300              # optional: the tolerance the receiver should accept
          kinds: [first, concurrent_copy, late_duplicate, out_of_order]   # optional (default: all four)
          late_after: 1s              # optional: a late duplicate's wait, an event's hold for disorder
      endpoints: [pay]                # optional: the endpoints that charge (default: all)
      faults:                         # optional: what a proxy cannot do (harness.provider.faults)
        - {operation: payment_intents.create, status: 500, when: after, probability: 0.3}

`webhooks` paths are on the service the probe runs (`service:`), or on the upstream.
Their knobs are the `webhooks:` entries' (harness.webhooks.config) where they apply to
events the ledger makes, plus the delivery kinds the outbox plays
(harness.provider.outbox): by default every kind, so a receiver sees retries,
concurrent copies, late duplicates and events out of order, each freshly signed.
Each fault is a `harness.provider.faults.FaultRule` (operation, status 500/429/null,
when after/before, stored fault/result, delay, count, probability). Every error is the
config's one-line error naming the field (`probe.yaml: provider.faults[0].status: ...`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from harness.fieldcheck import FieldChecker
from harness.provider.errors import ProviderError
from harness.provider.faults import FaultRule
from harness.provider.outbox import DEFAULT_LATE_AFTER, DEFAULT_TIMEOUT, MAX_LATE_AFTER, OUTBOX_KINDS, check_kinds
from harness.provider.routes import OPERATIONS
from harness.webhooks.schemes.base import DEFAULT_TOLERANCE

KINDS = ("stripe",)
KEYS = ("kind", "key_by", "api_key", "webhooks", "faults", "endpoints")
DEFAULT_API_KEY = "sk_test_probe"
_API_KEY = re.compile(r"^(sk|rk)_test_[A-Za-z0-9_]{1,200}$")
_SECRET = re.compile(r"^\S{8,200}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
WEBHOOK_KEYS = ("name", "scheme", "timeout", "tolerance", "kinds", "late_after")


@dataclass(frozen=True)
class ProviderWebhook:
    """One receiver of the provider's events: a path on the service and its signing secret."""

    path: str
    secret: str
    name: str = ""
    timeout: float = DEFAULT_TIMEOUT
    tolerance: int = DEFAULT_TOLERANCE
    kinds: tuple[str, ...] = OUTBOX_KINDS
    late_after: float = DEFAULT_LATE_AFTER


@dataclass(frozen=True)
class ProviderSpec:
    kind: str = "stripe"
    key_by: str = "/metadata/order_id"
    api_key: str = DEFAULT_API_KEY
    webhooks: tuple[ProviderWebhook, ...] = ()
    faults: tuple[FaultRule, ...] = ()
    endpoints: tuple[str, ...] = ()  # the endpoints that charge (names); () = every endpoint

    def to_raw(self) -> dict[str, Any]:
        """The plain form `parse_provider` reads back (config.json)."""
        return {"kind": self.kind, "key_by": self.key_by, "api_key": self.api_key,
                "webhooks": [{**asdict(hook), "kinds": list(hook.kinds)} for hook in self.webhooks],
                "faults": [asdict(rule) for rule in self.faults], "endpoints": list(self.endpoints)}


def parse_provider(where: FieldChecker, raw: Any, path: str = "provider") -> ProviderSpec:
    spec = where.mapping(raw, path, optional=KEYS)
    kind = spec.get("kind", "stripe")
    if kind not in KINDS:
        raise where.error(f"{path}.kind", f"must be one of {', '.join(KINDS)}, not {kind!r}")
    key_by = spec.get("key_by", "/metadata/order_id")
    if not isinstance(key_by, str) or not key_by.startswith("/") or len(key_by) < 2:
        raise where.error(f"{path}.key_by", f"must be a JSON pointer into a charge like /metadata/order_id, "
                          f"not {key_by!r}")
    api_key = spec.get("api_key", DEFAULT_API_KEY)
    if not isinstance(api_key, str) or not _API_KEY.match(api_key):
        raise where.error(f"{path}.api_key", f"must be a test secret key like sk_test_probe, not {api_key!r}")
    endpoints = spec.get("endpoints") or []
    if not isinstance(endpoints, list) or not all(isinstance(name, str) for name in endpoints):
        raise where.error(f"{path}.endpoints", "must be a list of endpoint names (the endpoints that charge)")
    return ProviderSpec(kind=kind, key_by=key_by, api_key=api_key, endpoints=tuple(endpoints),
                        webhooks=_webhooks(where, spec.get("webhooks"), f"{path}.webhooks"),
                        faults=_faults(where, spec.get("faults"), f"{path}.faults"))


def _webhooks(where: FieldChecker, raw: Any, path: str) -> tuple[ProviderWebhook, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise where.error(path, "must be a list of {path, secret}")
    hooks = []
    for i, item in enumerate(raw):
        at = f"{path}[{i}]"
        entry = where.mapping(item, at, required=("path", "secret"), optional=WEBHOOK_KEYS)
        url_path = entry["path"]
        if not isinstance(url_path, str) or not url_path.startswith("/") or any(c.isspace() for c in url_path):
            raise where.error(f"{at}.path", f"must be a URL path starting with /, not {url_path!r}")
        secret = entry["secret"]
        if not isinstance(secret, str) or not _SECRET.match(secret):
            raise where.error(f"{at}.secret", "must be a signing secret of 8 or more characters "
                              "without spaces, e.g. whsec_test_probe")
        name = entry.get("name", f"provider-webhook-{i}")
        if not isinstance(name, str) or not _NAME.match(name):
            raise where.error(f"{at}.name", f"must be letters, digits, '.', '_' or '-', not {name!r}")
        if entry.get("scheme", "stripe") != "stripe":
            raise where.error(f"{at}.scheme", f"the provider signs with stripe only, not {entry['scheme']!r}")
        timeout = where.duration(entry.get("timeout", DEFAULT_TIMEOUT), f"{at}.timeout")
        if timeout <= 0:
            raise where.error(f"{at}.timeout", "must be longer than 0s")
        tolerance = where.duration(entry.get("tolerance", DEFAULT_TOLERANCE), f"{at}.tolerance")
        if tolerance < 0 or tolerance != int(tolerance):
            raise where.error(f"{at}.tolerance", f"must be whole seconds >= 0, not {entry.get('tolerance')!r}")
        late_after = where.duration(entry.get("late_after", DEFAULT_LATE_AFTER), f"{at}.late_after")
        if not 0 <= late_after <= MAX_LATE_AFTER:
            raise where.error(f"{at}.late_after", f"must be 0-{MAX_LATE_AFTER:g}s, not {entry.get('late_after')!r}")
        kinds_raw = entry.get("kinds", list(OUTBOX_KINDS))
        if not isinstance(kinds_raw, list):
            raise where.error(f"{at}.kinds", f"must be a list of {', '.join(OUTBOX_KINDS)}")
        try:
            kinds = check_kinds(kinds_raw)
        except ProviderError as error:
            raise where.error(f"{at}.kinds", str(error)) from None
        hooks.append(ProviderWebhook(path=url_path, secret=secret, name=name, timeout=timeout,
                                     tolerance=int(tolerance), kinds=kinds, late_after=late_after))
    names = [hook.name for hook in hooks]
    if len(set(names)) != len(names):
        raise where.error(path, "names a webhook twice (give each its own name)")
    return tuple(hooks)


def _faults(where: FieldChecker, raw: Any, path: str) -> tuple[FaultRule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise where.error(path, "must be a list of faults like {operation: payment_intents.create, status: 500}")
    rules = []
    fields = tuple(FaultRule.__dataclass_fields__)
    for i, item in enumerate(raw):
        entry = where.mapping(item, f"{path}[{i}]", optional=fields)
        if "delay" in entry and isinstance(entry["delay"], str):
            entry = {**entry, "delay": where.duration(entry["delay"], f"{path}[{i}].delay")}
        try:
            rules.append(FaultRule.from_json(entry))
        except ProviderError as error:
            # The rule's own message names its field ("fault status must be ..."): point at it.
            message = str(error)
            named = next((name for name in fields if re.search(rf"\bfault {name}\b", message)), None)
            raise where.error(f"{path}[{i}]" + (f".{named}" if named else ""), message) from None
        if rules[-1].operation != "*" and rules[-1].operation not in OPERATIONS:
            raise where.error(f"{path}[{i}].operation", f"must be * or one of {', '.join(OPERATIONS)}, "
                              f"not {rules[-1].operation!r}")
    return tuple(rules)
