"""The invariants that judge effects (what the oracles found), not only the answers.

An endpoint's `effects:` names parameters (`key`, `id`, top-level body fields); the
*binding* of a request is its values for them. After the load harness.probe.effects
asks the oracle once per binding (and per identity, for an oracle that sees only the
asking identity's effects) and records an `EffectRecord`; here each record is judged
against the requests with that binding:

- `one_effect_per_key`: at most one effect per key and identity: a count above the
  number of identities that sent the binding (above one for a per-identity oracle).
- `acknowledged_effect_present`: every acknowledged request's effect is there: at
  least one effect per identity that got a 2xx (one, for a per-identity oracle or a
  query by `id`).
- `refused_no_effect`: a request that must be refused (a key reused with another
  payload; a request without the key where the endpoint requires one) left no effect:
  a binding only such requests have counts zero.

A query by `id` judges presence only (a resource may own several rows). Requests
without a value for a parameter (no key, no id in the answer) have no binding and are
not asked about.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from harness.probe.config import EffectsSpec, Endpoint

Scalar = str | int | float | bool | None
Binding = tuple[tuple[str, Scalar], ...]


class _Result(Protocol):
    checked: int

    def violate(self, message: str, **evidence: Any) -> None: ...


@dataclass(frozen=True)
class EffectRecord:
    """One oracle answer: the effects of `params`, as `identity` (None: all identities) sees them."""

    endpoint: str
    params: Mapping[str, Scalar]
    identity: int | None
    count: int
    ids: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint, "params": dict(self.params), "identity": self.identity,
                "count": self.count, "ids": list(self.ids) if self.ids is not None else None}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> EffectRecord:
        ids = raw.get("ids")
        return cls(endpoint=str(raw["endpoint"]), params=dict(raw["params"]), identity=raw.get("identity"),
                   count=int(raw["count"]), ids=tuple(ids) if ids is not None else None)


def binding(op: Mapping[str, Any], spec: EffectsSpec) -> Binding | None:
    """The request's values for the spec's parameters, None when one is missing."""
    values: list[tuple[str, Scalar]] = []
    raw_body = op.get("body")
    body: Mapping[str, Any] = raw_body if isinstance(raw_body, dict) else {}
    for name in spec.params:
        if name == "key":
            value = op.get("idempotency_key")
        elif name == "id":
            value = op.get("resource_id") if op.get("type") == "ok" else None
        else:
            value = body.get(name)
            if isinstance(value, (dict, list)):
                value = None
        if value is None:
            return None
        values.append((name, value))
    return tuple(values)


def must_refuse(op: Mapping[str, Any], endpoint: Endpoint, first_payloads: Mapping[Any, set[str]]) -> bool:
    """A request no correct service executes: a key reused with another payload, or no key
    where the endpoint requires one."""
    if op.get("idempotency_key") is None:
        return endpoint.requires_key
    if op.get("expect") != "payload_mismatch":
        return False
    group = (op.get("endpoint"), op.get("idempotency_key"), op.get("identity"))
    return str(op.get("fingerprint")) not in first_payloads.get(group, set())


def check_effects(records: Sequence[EffectRecord], operations: Sequence[Mapping[str, Any]],
                  endpoints: Mapping[str, Endpoint], results: Mapping[str, _Result], evidence: Any) -> None:
    """Judge every record (see the module docstring) into `results[name]`."""
    first_payloads: dict[Any, set[str]] = defaultdict(set)
    for op in operations:
        if op.get("idempotency_key") is not None and op.get("expect") != "payload_mismatch":
            first_payloads[(op.get("endpoint"), op.get("idempotency_key"), op.get("identity"))].add(
                str(op.get("fingerprint")))
    grouped: dict[tuple[str, Binding], list[Mapping[str, Any]]] = defaultdict(list)
    for op in operations:
        endpoint = endpoints.get(str(op.get("endpoint")))
        if endpoint is None or endpoint.effects is None:
            continue
        bound = binding(op, endpoint.effects)
        if bound is not None:
            grouped[(endpoint.name, bound)].append(op)
    many, present, refused = (results["one_effect_per_key"], results["acknowledged_effect_present"],
                              results["refused_no_effect"])
    for record in records:
        endpoint = endpoints[record.endpoint]
        assert endpoint.effects is not None
        ops = [op for op in grouped.get((record.endpoint, tuple(record.params.items())), [])
               if record.identity is None or op.get("identity") == record.identity]
        if not ops:
            continue
        shown = {"params": dict(record.params), "identity": record.identity, "count": record.count,
                 "ids": list(record.ids or [])[:10], "requests": [evidence(op) for op in ops][:6]}
        what = f"{record.endpoint}: {_describe(record)}"
        if all(must_refuse(op, endpoint, first_payloads) for op in ops):
            refused.checked += 1
            if record.count:
                kinds = sorted({str(op.get("expect")) for op in ops})
                refused.violate(f"{what}: {record.count} effect(s) of a request that must be refused "
                                f"({', '.join(kinds)})", **shown)
            continue
        identities = {op.get("identity") for op in ops}
        acknowledged = {op.get("identity") for op in ops if op.get("type") == "ok"}
        by_id = "id" in record.params
        if acknowledged:
            present.checked += 1
            needed = 1 if by_id or record.identity is not None else len(acknowledged)
            if record.count < needed:
                present.violate(f"{what}: {len(acknowledged)} identity(ies) got a 2xx but the service holds "
                                f"{record.count} effect(s)", **shown)
        if by_id:
            continue
        many.checked += 1
        limit = 1 if record.identity is not None else len(identities)
        if record.count > limit:
            many.violate(f"{what}: {record.count} effects for {len(identities)} identity(ies) "
                         f"(at most {limit})", **shown)


def _describe(record: EffectRecord) -> str:
    values = ", ".join(f"{name}={value!r}" for name, value in record.params.items())
    return values + (f" as identity {record.identity}" if record.identity is not None else "")
