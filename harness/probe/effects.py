"""After the load: ask each endpoint's oracle about every request binding, record the answers.

For an endpoint with `effects:`, every request of the history is bound to the oracle's
parameters (harness.probe.effect_checks.binding); each distinct binding is asked once,
and once per identity that sent it when the oracle sees only the asking identity's
effects (HTTP, with that identity's headers). Bounded in count and time; the answers go
to `effects.jsonl` in the run directory, one EffectRecord per line. An oracle failure
is an OracleError (exit 2): a run whose effects cannot be counted proves nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from harness.probe.config import ProbeConfig
from harness.probe.effect_checks import Binding, EffectRecord, binding
from harness.probe.identities import request_headers
from harness.probe.oracles import open_oracle

MAX_EFFECT_QUERIES = 800  # per endpoint
EFFECTS_BUDGET = 30.0  # seconds for all oracles together
EFFECTS_FILE = "effects.jsonl"


def with_effects(raw: Mapping[str, Any], effects: Any) -> dict[str, Any]:
    """A raw config (`ProbeConfig.to_dict()`'s form) with `effects` given to its endpoints:
    one `effects:` mapping for every endpoint, or {endpoint name: effects}; None keeps
    the config's own. Used by the pytest plugin's `effects=`; parse_config checks it."""
    result = dict(raw)
    if effects is None:
        return result
    endpoints = [dict(endpoint) for endpoint in raw.get("endpoints") or []]
    names = {str(endpoint.get("name")) for endpoint in endpoints}
    per_endpoint = isinstance(effects, Mapping) and bool(effects) and set(effects) <= names
    for endpoint in endpoints:
        if per_endpoint:
            if endpoint.get("name") in effects:
                endpoint["effects"] = effects[endpoint["name"]]
        else:
            endpoint["effects"] = effects
    result["endpoints"] = endpoints
    return result


def collect_effects(config: ProbeConfig, upstream: str, operations: Sequence[Mapping[str, Any]],
                    path: Path) -> list[EffectRecord]:
    deadline = time.monotonic() + EFFECTS_BUDGET
    records: list[EffectRecord] = []
    for endpoint in config.endpoints:
        if endpoint.effects is None:
            continue
        oracle = open_oracle(endpoint.name, endpoint.effects, upstream=upstream)
        try:
            asks: dict[tuple[Binding, int | None], None] = {}
            for op in operations:
                if op.get("op") != "create_order" or op.get("endpoint") != endpoint.name:
                    continue
                bound = binding(op, endpoint.effects)
                if bound is not None:
                    asks.setdefault((bound, op.get("identity") if oracle.per_identity else None), None)
            for bound, identity in list(asks)[:MAX_EFFECT_QUERIES]:
                if time.monotonic() > deadline:
                    break
                found = oracle.count(dict(bound), request_headers(config, endpoint, identity))
                records.append(EffectRecord(endpoint=endpoint.name, params=dict(bound),
                                            identity=identity if oracle.per_identity else None,
                                            count=found.count, ids=found.ids))
        finally:
            oracle.close()
    path.write_bytes(b"".join(orjson.dumps(record.to_dict()) + b"\n" for record in records))
    return records
