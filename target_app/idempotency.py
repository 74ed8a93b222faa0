"""The Idempotency-Key layer as a WSGI middleware (one request in, one record).

Contract (DESIGN.md, "Target app contract"):
- same key + same fingerprint (method, path, body) → the stored status and body
  again, with `Idempotent-Replayed: true`;
- same key + another fingerprint → 409; same key while the first request is still
  running → 409 with `Retry-After`;
- a 5xx is never stored: the key is released so the next retry runs for real;
- store unavailable → 503; keys are scoped by tenant (`X-Tenant-ID`);
- a body shorter than its Content-Length → 400 `/problems/incomplete-body`, counted
  (`api_incomplete_bodies`), never fingerprinted, never stored (no `begin`).
Only requests for which `applies(method, path)` is true go through the layer; they
must carry a valid key. The layer costs two store calls: begin and finish.

The handler learns that the layer guards its request from one explicit value, an
`IdempotencyContext` in the WSGI environ under `IDEMPOTENCY_CONTEXT_ENVIRON` (the
tenant scope, key, fingerprint and TTL of the record), so it writes its recovery
point under exactly the record's identity. A handler that refuses the request
because the recovery point belongs to another fingerprint sets
`RELEASE_ENVIRON`: its 409 is answered but not stored, so the key's honest retry
still finds the recovery point instead of a stored refusal.

Negative controls (flags of the middleware): `ignore_fingerprint` (`api-fingerprint`),
`tenant_scoped=False` (`api-tenant`: one scope for every tenant), `accept_incomplete`
(`incomplete-body`).
"""

from __future__ import annotations

import hashlib
import io
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from target_app.errors import Problem, StoreUnavailable, problem_wsgi_response
from target_app.idempotency_store import IdempotencyStore
from target_app.validation import IncompleteBody, read_body

log = logging.getLogger(__name__)

MAX_KEY_LENGTH = 255
REPLAY_HEADER = ("Idempotent-Replayed", "true")
# The WSGI environ key of the IdempotencyContext of every request this layer guards,
# so the handler can write the layer's recovery point in the same step as its effect.
IDEMPOTENCY_CONTEXT_ENVIRON = "target_app.idempotency.context"
# Set (to True) by a handler whose answer must not be stored: the key is released.
RELEASE_ENVIRON = "target_app.idempotency.release"
# The one scope every tenant shares under the `api-tenant` negative control (a real
# tenant is never empty).
SHARED_TENANT_SCOPE = ""
# The fingerprint every request has under the `api-fingerprint` negative control.
IGNORED_FINGERPRINT = "-"
# Pauses between attempts to record a finished response (None: give up).
FINISH_RETRY_PAUSES = (0.05, 0.2, None)
# Headers of the original response worth replaying (hop-by-hop and dates are not).
STORED_HEADERS = frozenset({"content-type", "location"})


@dataclass(frozen=True)
class IdempotencyContext:
    """What the API layer guards a request under: the tenant scope the record is
    filed under (the request's tenant; one shared scope under `api-tenant`), the
    Idempotency-Key, the request fingerprint and how long the finished record is kept."""

    tenant: str
    key: str
    fingerprint: str
    ttl_seconds: int


def fingerprint(method: str, path: str, body: bytes) -> str:
    """sha256 hex of `METHOD\\nPATH\\nraw body` (docs/internals.md)."""
    digest = hashlib.sha256()
    digest.update(method.encode("latin-1") + b"\n" + path.encode("latin-1") + b"\n")
    digest.update(body)
    return digest.hexdigest()


def valid_token(value: str | None, *, max_length: int = MAX_KEY_LENGTH) -> bool:
    """Non-empty, at most `max_length`, printable ASCII, not only blanks."""
    if not value or len(value) > max_length or not value.strip():
        return False
    return all(0x20 <= ord(ch) < 0x7F for ch in value)


def tenant_of(environ: dict) -> str:
    """`X-Tenant-ID` or `default`; raises a 400 Problem when malformed."""
    raw = environ.get("HTTP_X_TENANT_ID")
    if raw is None:
        return "default"
    if not valid_token(raw, max_length=128):
        raise Problem(400, "Invalid tenant", "X-Tenant-ID must be 1-128 printable ASCII characters",
                      type_="/problems/invalid-tenant")
    return raw


class IdempotencyMiddleware:
    """Wraps a WSGI app; Werkzeug style (`app.wsgi_app = IdempotencyMiddleware(...)`)."""

    def __init__(self, app: Callable, *, store: IdempotencyStore,
                 applies: Callable[[str, str], bool], ttl_seconds: int, lease_seconds: int,
                 max_body_bytes: int, ignore_fingerprint: bool = False, tenant_scoped: bool = True,
                 accept_incomplete: bool = False) -> None:
        self.app = app
        self.store = store
        self.applies = applies
        self.ttl_seconds = ttl_seconds
        self.lease_seconds = lease_seconds
        self.max_body_bytes = max_body_bytes
        self.ignore_fingerprint = ignore_fingerprint
        self.tenant_scoped = tenant_scoped
        self.accept_incomplete = accept_incomplete

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "")
        if not self.applies(method, path):
            return self.app(environ, start_response)
        try:
            return self._handle(environ, start_response, method, path)
        except Problem as problem:
            return problem_wsgi_response(problem, start_response)

    def _handle(self, environ: dict, start_response: Callable, method: str, path: str) -> Iterable[bytes]:
        key = environ.get("HTTP_IDEMPOTENCY_KEY")
        if key is None:
            raise Problem(400, "Missing Idempotency-Key",
                          "this endpoint requires an Idempotency-Key header",
                          type_="/problems/missing-idempotency-key")
        if not valid_token(key):
            raise Problem(400, "Invalid Idempotency-Key",
                          f"the key must be 1-{MAX_KEY_LENGTH} printable ASCII characters",
                          type_="/problems/invalid-idempotency-key")
        request_tenant = tenant_of(environ)  # a malformed header is refused either way
        tenant = request_tenant if self.tenant_scoped else SHARED_TENANT_SCOPE
        body = self._read_body(environ)
        digest = IGNORED_FINGERPRINT if self.ignore_fingerprint else fingerprint(method, path, body)
        found = self._store_call(self.store.begin, tenant, key, digest,
                                 lease_seconds=self.lease_seconds)
        if found.outcome == "replay":
            headers = list(found.headers) + [("Content-Length", str(len(found.body))), REPLAY_HEADER]
            start_response(_status_line(found.status), headers)
            return [found.body]
        if found.outcome == "mismatch":
            raise Problem(409, "Idempotency-Key reused",
                          "this key was already used with a different request (method, path or body)",
                          type_="/problems/idempotency-key-mismatch")
        if found.outcome == "in_flight":
            raise Problem(409, "Request in progress",
                          "a request with this key is still being processed; retry later",
                          type_="/problems/idempotency-key-in-flight",
                          headers={"Retry-After": str(found.retry_after)})
        context = IdempotencyContext(tenant=tenant, key=key, fingerprint=digest,
                                     ttl_seconds=self.ttl_seconds)
        return self._run(environ, start_response, context, found.token, body)

    def _run(self, environ: dict, start_response: Callable, context: IdempotencyContext,
             token: str, body: bytes) -> Iterable[bytes]:
        tenant, key = context.tenant, context.key
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        environ[IDEMPOTENCY_CONTEXT_ENVIRON] = context
        captured: dict = {}

        def capture(status, headers, exc_info=None):
            captured["status"], captured["headers"] = status, headers
            return lambda data: captured.setdefault("early", []).append(data)

        try:
            result = self.app(environ, capture)
            try:
                chunks = captured.pop("early", []) + list(result)
            finally:
                if hasattr(result, "close"):
                    result.close()
        except BaseException:
            self._release(tenant, key, token)
            raise
        response_body = b"".join(chunks)
        if environ.get(RELEASE_ENVIRON) is True:
            # The handler refused the request on behalf of this layer (a recovery
            # point of another fingerprint): answer, but leave the key free.
            self._release(tenant, key, token)
            start_response(captured["status"], captured["headers"])
            return [response_body]
        status_code = int(captured["status"].split(" ", 1)[0])
        stored = [(name, value) for name, value in captured["headers"]
                  if name.lower() in STORED_HEADERS]
        try:
            self._finish_with_retries(tenant, key, token, status_code, stored, response_body)
        except StoreUnavailable as exc:
            # The effect may have happened; the record stays in flight until its
            # lease ends, and the client is told the outcome is unknown. A retry
            # after the lease runs the handler again, which finds the recovery
            # point the handler wrote with its effect (an order) or the domain
            # guard (a payment), so it does not repeat the effect.
            log.warning("idempotency finish failed for tenant=%s: %s", tenant, exc)
            raise Problem(503, "Store unavailable",
                          "the response could not be recorded; retry with the same key later",
                          type_="/problems/store-unavailable",
                          headers={"Retry-After": str(self.lease_seconds)}) from exc
        start_response(captured["status"], captured["headers"])
        return [response_body]

    def _finish_with_retries(self, tenant, key, token, status, headers, body) -> None:
        # The effect has happened; losing the record now would let a retry run it
        # again, so a short brownout is worth waiting out. Finish is safe to repeat:
        # once stored, the token no longer matches and a repeat changes nothing.
        for pause in FINISH_RETRY_PAUSES:
            try:
                self.store.finish(tenant, key, token, status=status, headers=headers, body=body,
                                  ttl_seconds=self.ttl_seconds)
                return
            except StoreUnavailable:
                if pause is None:
                    raise
                time.sleep(pause)

    def _release(self, tenant: str, key: str, token: str) -> None:
        try:
            self.store.finish(tenant, key, token, status=500, headers=[], body=b"",
                              ttl_seconds=self.ttl_seconds)
        except StoreUnavailable:
            log.warning("could not release idempotency key for tenant=%s", tenant)

    def _store_call(self, func, *args, **kwargs):
        try:
            return func(*args, **kwargs)
        except StoreUnavailable as exc:
            raise Problem(503, "Store unavailable", "the idempotency store cannot be reached",
                          type_="/problems/store-unavailable", headers={"Retry-After": "1"}) from exc

    def _read_body(self, environ: dict) -> bytes:
        try:
            return read_body(environ, self.max_body_bytes, allow_incomplete=self.accept_incomplete)
        except IncompleteBody:
            try:
                self.store.count("api_incomplete_bodies")
            except StoreUnavailable:
                pass  # the 400 matters more than the counter
            raise


def _status_line(status: int) -> str:
    from http import HTTPStatus

    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"
