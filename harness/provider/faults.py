"""Provider-side faults, the ones a proxy between the service and the provider cannot make.

A `FaultRule` targets one operation (`payment_intents.confirm`, `refunds.create`, ... or
`*`) and plays, on a matching request:

- `status` 500 (`api_error`) or 429 (`rate_limit_error`), `when` `after` the operation ran
  (the charge is made; only the answer is an error, as Stripe may answer 500 for a
  request that succeeded) or `before` it (nothing ran, nothing is stored);
- `delay` seconds of slowness before the answer (with or without a status);
- `stored`: for an `after` fault, what the idempotency layer keeps for the key:
  `fault` (Stripe's documented behaviour: the error answered is the result a retry
  with the same key gets) or `result` (the true answer is stored and only this reply
  is replaced, like a reply lost on the way: a retry with the same key gets it).

`count` bounds how many requests a rule hits (None: every one), `probability` draws per
matching request from the provider's seeded generator, so a run is repeatable.
Replays of stored answers are never faulted. `Faults` is the thread-safe set of rules
the server consults; rules parse from JSON (`FaultRule.from_json`) for the control
endpoint `/_harness/faults` (POST adds, GET reads back with hits, DELETE clears all or,
with a rule as its body, takes out that one: what a plan's `provider_fault` window does).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, cast

from harness.provider.errors import ProviderError

STATUSES = (500, 429)
WHEN = ("after", "before")
STORED = ("fault", "result")
MAX_DELAY = 120.0  # seconds: longer is a mistake, and would hold a server thread that long


@dataclass(frozen=True)
class FaultRule:
    operation: str = "*"
    status: int | None = 500
    when: str = "after"
    delay: float = 0.0
    count: int | None = None
    probability: float = 1.0
    stored: str = "fault"

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in STATUSES:
            raise ProviderError(f"fault status must be one of {', '.join(map(str, STATUSES))} or null, "
                                f"not {self.status!r}")
        if self.when not in WHEN:
            raise ProviderError(f"fault when must be one of {', '.join(WHEN)}, not {self.when!r}")
        if self.stored not in STORED:
            raise ProviderError(f"fault stored must be one of {', '.join(STORED)}, not {self.stored!r}")
        if not 0 <= self.delay <= MAX_DELAY:
            raise ProviderError(f"fault delay must be 0-{MAX_DELAY:g} seconds, not {self.delay!r}")
        if self.count is not None and self.count < 1:
            raise ProviderError(f"fault count must be at least 1 (or null: unlimited), not {self.count!r}")
        if not 0 < self.probability <= 1:
            raise ProviderError(f"fault probability must be in (0, 1], not {self.probability!r}")
        if self.status is None and self.delay == 0:
            raise ProviderError("a fault needs a status, a delay or both")

    @classmethod
    def from_json(cls, raw: Any) -> FaultRule:
        if not isinstance(raw, Mapping):
            raise ProviderError("a fault is a JSON object like {\"operation\": \"payment_intents.create\", "
                                "\"status\": 500}")
        unknown = set(raw) - set(cls.__dataclass_fields__)
        if unknown:
            raise ProviderError(f"unknown fault field(s): {', '.join(sorted(unknown))}")
        try:
            return cls(**{name: _typed(name, value) for name, value in raw.items()})
        except TypeError as error:
            raise ProviderError(f"bad fault: {error}") from None

    def describe(self) -> str:
        parts = []
        if self.status is not None:
            parts.append(f"{self.status} {self.when}")
        if self.delay:
            parts.append(f"delay {self.delay:g}s")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _typed(name: str, value: Any) -> Any:
    kinds: dict[str, tuple[type, ...]] = {"operation": (str,), "status": (int, type(None)), "when": (str,),
                                          "delay": (int, float), "count": (int, type(None)),
                                          "probability": (int, float), "stored": (str,)}
    if isinstance(value, bool) or not isinstance(value, kinds[name]):
        raise ProviderError(f"fault {name}: wrong type {type(value).__name__}")
    if name in ("delay", "probability"):
        return float(cast(float, value))
    return value


@dataclass(frozen=True)
class ActiveFault:
    """A rule and how many requests it has hit."""

    rule: FaultRule
    hits: int


class Faults:
    """The rules in force, consulted once per request (first matching rule that fires wins)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._lock = threading.Lock()
        self._rules: list[list[Any]] = []  # [rule, hits]

    def add(self, rule: FaultRule, operations: tuple[str, ...] = ()) -> None:
        if operations and rule.operation != "*" and rule.operation not in operations:
            raise ProviderError(f"unknown operation {rule.operation!r} (one of *, {', '.join(operations)})")
        with self._lock:
            self._rules.append([rule, 0])

    def remove(self, rule: FaultRule) -> int | None:
        """Take out the first rule equal to `rule`; its hits, or None when none was in force."""
        with self._lock:
            for index, entry in enumerate(self._rules):
                if entry[0] == rule:
                    del self._rules[index]
                    return int(entry[1])
        return None

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def active(self) -> list[ActiveFault]:
        with self._lock:
            return [ActiveFault(rule, hits) for rule, hits in self._rules]

    def draw(self, operation: str) -> FaultRule | None:
        """The rule to play on one request of `operation`, counting its hit; None: no fault."""
        with self._lock:
            for entry in self._rules:
                rule: FaultRule = entry[0]
                if rule.operation not in ("*", operation):
                    continue
                if rule.count is not None and entry[1] >= rule.count:
                    continue
                if rule.probability < 1 and self._rng.random() >= rule.probability:
                    continue
                entry[1] += 1
                return rule
        return None
