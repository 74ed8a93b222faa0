"""One request through the provider: auth, routing, idempotency, faults, the record.

`ProviderApi.handle(HttpRequest) -> HttpResponse` knows nothing of sockets (the server
adapts it), so the whole pipeline is testable in-process:

1. every answer carries `Request-Id` (and `Stripe-Version`, `Idempotency-Key` echoed);
2. the secret key: `Authorization: Bearer sk_test_...` or HTTP Basic with the key as
   user; anything else is 401 `authentication_error` (live keys included: this is a
   test-mode simulator). Keys are scopes: idempotency keys of one never meet another's;
3. `/_harness/...` is the control surface (faults, the ledger), behind the same keys;
4. the route (404 `invalid_request_error` for an unknown URL), then the form parameters;
5. on a POST with `Idempotency-Key`, the idempotency store (harness.provider.idempotency):
   a replay answers the stored status and body with `Idempotent-Replayed: true` and
   `Original-Request`, a reuse with other parameters is 400 `idempotency_error`, a
   reuse while the first runs is 409 `idempotency_key_in_use`;
6. a fault rule drawn for the operation (harness.provider.faults) may answer 500/429
   before anything runs, or after it ran, and may slow the answer;
7. `prepare` (validation: not stored) then `run` (stored, errors included);
8. a `RequestRecord` in the ledger for every answer.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.provider.calls import Call
from harness.provider.errors import ApiError, ProviderError, invalid
from harness.provider.faults import FaultRule, Faults
from harness.provider.forms import FormError, canonical, decode
from harness.provider.idempotency import (
    MAX_KEY_LENGTH,
    Claimed,
    IdempotencyStore,
    InUse,
    Mismatch,
    Replay,
    StoredAnswer,
)
from harness.provider.ledger import Ledger
from harness.provider.objects import API_VERSION
from harness.provider.records import RequestInfo, RequestRecord, to_dict
from harness.provider.routes import OPERATIONS, find_route

CONTROL_PREFIX = "/_harness/"
_KEY = re.compile(r"^(sk|rk)_test_[A-Za-z0-9_]{1,240}$")
JSON = "application/json"


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    query: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)  # names lower-cased
    body: bytes = b""

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: Mapping[str, str]
    body: bytes


def key_scope(key: str) -> str:
    """A key's public tail, what the ledger shows instead of the key."""
    return f"{key[:8]}…{key[-4:]}"


class ProviderApi:
    def __init__(self, ledger: Ledger, *, idempotency: IdempotencyStore, faults: Faults,
                 api_keys: frozenset[str] = frozenset(), sleep: Callable[[float], None] = time.sleep) -> None:
        self.ledger = ledger
        self.idempotency = idempotency
        self.faults = faults
        self.api_keys = api_keys  # empty: every well-formed sk_test_/rk_test_ key
        self.sleep = sleep

    def handle(self, request: HttpRequest) -> HttpResponse:
        request_id = self.ledger.new_id("req_")
        started = time.time()
        base = {"Request-Id": request_id, "Stripe-Version": request.header("stripe-version") or API_VERSION}
        key = request.header("idempotency-key") if request.method == "POST" else None
        if key is not None:
            base["Idempotency-Key"] = key
        try:
            secret = self._authenticate(request)
        except ApiError as error:
            return self._error(error, base, {"WWW-Authenticate": 'Basic realm="Stripe"'})
        if request.path.startswith(CONTROL_PREFIX):
            return self._control(request, base)
        scope = key_scope(secret)  # what the ledger shows; idempotency keys are scoped by the whole key
        found = find_route(request.method, request.path)
        operation = found[0].operation if found else "unknown"

        def log(status: int, *, replayed: bool = False, fault: FaultRule | None = None) -> None:
            self.ledger.log_request(RequestRecord(
                method=request.method, path=request.path, operation=operation, status=status, time=started,
                request_id=request_id, idempotency_key=key, key_scope=scope, replayed=replayed,
                fault=fault.describe() if fault else None))

        if found is None:
            log(404)
            return self._error(ApiError(404, "invalid_request_error",
                                        f"Unrecognized request URL ({request.method}: {request.path}).",
                                        stored=False), base)
        route, path_args = found
        try:
            params = decode(request.body.decode("utf-8", "replace") if request.method == "POST" else request.query)
        except FormError as error:
            log(400)
            return self._error(invalid(str(error), param=error.param), base)
        if key is not None:
            if not key or len(key) > MAX_KEY_LENGTH:
                log(400)
                return self._error(invalid(f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} characters",
                                           param="Idempotency-Key"), base)
            claim = self.idempotency.claim(secret, key, fingerprint=canonical(
                {"method": request.method, "path": request.path, "params": params}), path=request.path)
            if isinstance(claim, InUse):
                log(409)
                return self._error(ApiError(409, "invalid_request_error",
                                            "There is currently another in-progress request using this "
                                            "Stripe token (probably the same idempotency key). Retry your "
                                            "request once the other has finished.",
                                            code="idempotency_key_in_use", stored=False), base)
            if isinstance(claim, Mismatch):
                log(400)
                return self._error(ApiError(400, "idempotency_error",
                                            "Keys for idempotent requests can only be used with the same "
                                            f"parameters they were first used with. Try using a key other "
                                            f"than '{key}' if you meant to execute a different request.",
                                            stored=False), base)
            if isinstance(claim, Replay):
                log(claim.answer.status, replayed=True)
                return HttpResponse(claim.answer.status, {**claim.answer.headers, **base,
                                                          "Idempotent-Replayed": "true",
                                                          "Original-Request": claim.answer.headers.get(
                                                              "Request-Id", "")}, claim.answer.body)
            assert isinstance(claim, Claimed)
        info = RequestInfo(method=request.method, path=request.path, time=started, request_id=request_id,
                           idempotency_key=key, key_scope=scope)
        fault = self.faults.draw(route.operation)
        answer: HttpResponse | None = None
        try:
            if fault is not None and fault.when == "before" and fault.status is not None:
                raise _fault_error(fault, stored=False)
            try:
                run = route.prepare(Call(self.ledger, params, path_args, info))
                body = run()
                answer = self._json(200, body, base)
            except ApiError as error:
                if not error.stored:
                    raise
                answer = self._error(error, base)
            except Exception as error:  # noqa: BLE001 - a bug of ours is Stripe's 500, stored like one
                answer = self._error(ApiError(500, "api_error", f"An unknown error occurred ({type(error).__name__})"),
                                     base)
            stored = answer
            if fault is not None and fault.when == "after" and fault.status is not None:
                answer = self._error(_fault_error(fault, stored=True), base)
                if fault.stored == "fault":
                    stored = answer
            if fault is not None and fault.delay:
                self.sleep(fault.delay)
            if key is not None:
                self.idempotency.complete(secret, key, StoredAnswer(stored.status, _stored_headers(stored),
                                                                   stored.body))
        except ApiError as error:  # not stored: validation, a fault before running
            if key is not None:
                self.idempotency.release(secret, key)
            if fault is not None and fault.delay:
                self.sleep(fault.delay)
            answer = self._error(error, base)
        log(answer.status, fault=fault)
        return answer

    # --- auth -----------------------------------------------------------------------------

    def _authenticate(self, request: HttpRequest) -> str:
        header = request.header("authorization")
        if not header:
            raise ApiError(401, "authentication_error", "You did not provide an API key. You need to provide "
                           "your API key in the Authorization header, using Bearer auth "
                           "(e.g. 'Authorization: Bearer YOUR_SECRET_KEY').", stored=False)
        scheme, _, value = header.strip().partition(" ")
        key = ""
        if scheme.lower() == "bearer":
            key = value.strip()
        elif scheme.lower() == "basic":
            try:
                key = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[0]
            except (binascii.Error, UnicodeDecodeError):
                key = ""
        if not _KEY.match(key) or (self.api_keys and key not in self.api_keys):
            shown = f"{key[:8]}{'*' * 4}{key[-4:]}" if len(key) > 12 else "(malformed)"
            raise ApiError(401, "authentication_error", f"Invalid API Key provided: {shown}", stored=False)
        return key

    # --- the control surface ----------------------------------------------------------------

    def _control(self, request: HttpRequest, base: dict[str, str]) -> HttpResponse:
        name = request.path[len(CONTROL_PREFIX):].strip("/")
        if name == "faults":
            if request.method == "GET":
                return self._faults_answer(base)
            if request.method == "DELETE":
                if not request.body.strip():
                    self.faults.clear()
                    return self._faults_answer(base)
                try:  # one rule: the heal of a plan's window, leaving the config's rules in force
                    rule = FaultRule.from_json(json.loads(request.body))
                except (ValueError, ProviderError) as error:
                    return _problem(400, str(error), base)
                hits = self.faults.remove(rule)
                if hits is None:
                    return _problem(404, f"no such fault in force: {rule.describe()} on {rule.operation}", base)
                # The rule's hits come back with the removal, counted under the same lock, so a
                # request drawn between a read and the removal is never left out.
                return self._faults_answer(base, removed={**rule.to_json(), "hits": hits})
            if request.method == "POST":
                try:
                    raw = json.loads(request.body or b"null")
                    rules = raw["faults"] if isinstance(raw, dict) and "faults" in raw else [raw]
                    if not isinstance(rules, list):
                        raise ProviderError("faults must be a list of fault objects")
                    parsed = [FaultRule.from_json(rule) for rule in rules]
                    for rule in parsed:
                        self.faults.add(rule, OPERATIONS)
                except (ValueError, ProviderError) as error:
                    return _problem(400, str(error), base)
                return self._faults_answer(base)
        if name == "ledger" and request.method == "GET":
            lines = "".join(json.dumps(to_dict(record), sort_keys=True) + "\n" for record in self.ledger.records())
            return HttpResponse(200, {**base, "Content-Type": "application/x-ndjson"}, lines.encode("utf-8"))
        return _problem(404, f"no control endpoint {request.method} {request.path} "
                        f"(GET/POST/DELETE {CONTROL_PREFIX}faults, GET {CONTROL_PREFIX}ledger)", base)

    def _faults_answer(self, base: dict[str, str], *, removed: dict[str, Any] | None = None) -> HttpResponse:
        active = [{**item.rule.to_json(), "hits": item.hits} for item in self.faults.active()]
        body: dict[str, Any] = {"faults": active, "operations": list(OPERATIONS)}
        if removed is not None:
            body["removed"] = removed
        return self._json(200, body, base)

    # --- answers ------------------------------------------------------------------------------

    @staticmethod
    def _json(status: int, body: Any, base: Mapping[str, str]) -> HttpResponse:
        return HttpResponse(status, {**base, "Content-Type": JSON},
                            json.dumps(body, indent=2).encode("utf-8"))

    def _error(self, error: ApiError, base: Mapping[str, str],
               extra: Mapping[str, str] | None = None) -> HttpResponse:
        headers = {**base, **(extra or {})}
        if error.status == 409:
            headers["Stripe-Should-Retry"] = "true"
        return self._json(error.status, error.envelope(), headers)


def _fault_error(rule: FaultRule, *, stored: bool) -> ApiError:
    if rule.status == 429:
        return ApiError(429, "rate_limit_error", "Request rate limit exceeded. You can learn more about rate "
                        "limits here https://stripe.com/docs/rate-limits.", code="rate_limit", stored=stored)
    return ApiError(500, "api_error", "An unknown error occurred (simulated by the provider's fault "
                    f"{rule.describe()}).", stored=stored)


def _stored_headers(answer: HttpResponse) -> dict[str, str]:
    return {name: value for name, value in answer.headers.items()
            if name in ("Content-Type", "Request-Id", "Stripe-Should-Retry")}


def _problem(status: int, detail: str, base: Mapping[str, str]) -> HttpResponse:
    body = {"type": "about:blank", "title": "Bad Request" if status == 400 else "Not Found", "status": status,
            "detail": detail}
    return HttpResponse(status, {**base, "Content-Type": "application/problem+json"},
                        json.dumps(body).encode("utf-8"))
