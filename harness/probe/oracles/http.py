"""The HTTP oracle: a GET on the service that counts a request's effects.

`path` has placeholders (`{key}`, `{id}`, `{field}` of the body), filled with the
request's values (URL-quoted); the answer's JSON at `count` is the number of effects,
or the list at `items` holds them (each item's `id`, when it is an object with one, is
the effect's id). The GET carries the asking identity's headers, so it counts what
that identity may see. An answer that is not 2xx JSON with a number or a list there
is an OracleError: the oracle is broken, not the service idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

import requests

from harness.probe.answers import json_pointer
from harness.probe.config import EffectsSpec
from harness.probe.oracles.base import Effects, OracleError, Scalar

TIMEOUT = 3.0


class HttpOracle:
    per_identity = True

    def __init__(self, endpoint: str, spec: EffectsSpec, *, upstream: str) -> None:
        assert spec.path is not None
        self.endpoint = endpoint
        self.spec = spec
        self.base = f"http://{upstream}"
        self.session = requests.Session()

    def url(self, params: Mapping[str, Scalar]) -> str:
        path = self.spec.path or ""
        for name in self.spec.params:
            path = path.replace("{" + name + "}", quote(str(params[name]), safe=""))
        return self.base + path

    def count(self, params: Mapping[str, Scalar], headers: Mapping[str, str]) -> Effects:
        url = self.url(params)
        what = f"effects of {self.endpoint}: GET {url}"
        try:
            response = self.session.get(url, headers=dict(headers), timeout=TIMEOUT)
        except requests.RequestException as error:
            raise OracleError(f"{what} failed: {type(error).__name__}: {error}") from None
        if not 200 <= response.status_code < 300:
            raise OracleError(f"{what} answered {response.status_code}: {response.text[:200]!r}")
        try:
            data = response.json()
        except ValueError:
            raise OracleError(f"{what} answered no JSON: {response.text[:200]!r}") from None
        if self.spec.count is not None:
            value = json_pointer(data, self.spec.count)
            if isinstance(value, bool) or not isinstance(value, int):
                raise OracleError(f"{what}: no count at {self.spec.count!r} in {response.text[:200]!r}")
            return Effects(count=value)
        items = json_pointer(data, self.spec.items or "")
        if not isinstance(items, list):
            raise OracleError(f"{what}: no list at {self.spec.items!r} in {response.text[:200]!r}")
        ids = tuple(str(item["id"]) for item in items if isinstance(item, dict) and "id" in item)
        return Effects(count=len(items), ids=ids if len(ids) == len(items) else None)

    def close(self) -> None:
        self.session.close()
