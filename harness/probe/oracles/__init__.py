"""Oracles: after the load, how many effects a request had, asked of the service itself.

One small interface, `Oracle`: given the parameters of one request (its key, the id
an answer named, fields of its body), `count(params, headers)` says how many effects
the service holds for them and, when it can tell, which (`Effects`). Invariants read
oracles, never a service's internals: harness.probe.effects runs them after the load,
harness.probe.effect_checks judges what they found.

- `http.HttpOracle`: a GET on the service (`path` with `{key}`, `{id}` or `{field}`
  placeholders), the count or the list at a JSON pointer; it asks as the identity that
  sent the request, so it counts what that identity owns (`per_identity`).
- `sql.SqlOracle`: a read-only query on the service's own database (PostgreSQL through
  psycopg 3, or SQLite), with `:key`, `:id` or `:field` parameters and a statement
  timeout; it sees every identity's rows.

A query that fails is an `OracleError` (a HarnessError: exit 2) naming the endpoint
and the query: a broken oracle must never read as "no effect".
"""

from __future__ import annotations

from harness.probe.config import EffectsSpec
from harness.probe.oracles.base import Effects, Oracle, OracleError, Scalar

__all__ = ["Effects", "Oracle", "OracleError", "Scalar", "open_oracle"]


def open_oracle(endpoint: str, spec: EffectsSpec, *, upstream: str) -> Oracle:
    """The oracle an endpoint's `effects:` describes."""
    if spec.kind == "sql":
        from harness.probe.oracles.sql import SqlOracle

        return SqlOracle(endpoint, spec)
    from harness.probe.oracles.http import HttpOracle

    return HttpOracle(endpoint, spec, upstream=upstream)
