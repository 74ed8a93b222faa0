"""The Idempotency-Key layer as a WSGI middleware (one request in, one record).

    app.wsgi_app = IdempotencyMiddleware(app.wsgi_app, store=..., ttl_seconds=...,
                                         lease_seconds=..., max_body_bytes=...)

Contract:
- only requests for which `applies(method, path)` is true go through the layer
  (by default `endpoints.requires_idempotency_key`); they must carry a valid key
  (1-255 printable ASCII characters), else 400;
- same key + same fingerprint (method, path, body) → the stored status and body
  again, with `Idempotent-Replayed: true`;
- same key + another fingerprint → 409; same key while the first request is still
  running → 409 with `Retry-After`;
- a 5xx (or an exception) is never stored: the key is released so the next retry
  runs for real; so is an answer whose handler called `context.release_key()`;
- store unavailable → 503; keys are scoped by tenant (`X-Tenant-ID`);
- a body shorter than its Content-Length → 400 `/problems/incomplete-body`, counted
  (`api_incomplete_bodies`), never fingerprinted, never stored (no `begin`).
The layer costs two store calls: begin and finish.

Environ keys it writes, on guarded requests only, before calling the app:
- `wsgi.input`: a fresh stream over the body it read (the app reads it again);
- `CONTENT_LENGTH`: the length of that body;
- `target_app.idempotency.context` (`CONTEXT_ENVIRON`): the request's
  `IdempotencyContext`, read by handlers with `context_of(environ)`.

Crash points (`crash_points`, target_app/crashpoints.py): `api.after_claim` once the
key is claimed, before the handler; `api.after_domain` once the handler answered,
before the answer is stored; `api.after_store` once it is stored, before it is sent
(`drop-reply` there closes the connection instead). An injected error is 503 like a
store outage: before the answer is stored the key is released.

Negative controls (flags): `ignore_fingerprint` (`api-fingerprint`),
`tenant_scoped=False` (`api-tenant`: one scope for every tenant),
`accept_incomplete` (`incomplete-body`).
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import TYPE_CHECKING

from target_app.crashpoints import CrashPointError, CrashPoints, drop_reply
from target_app.errors import Problem, StoreUnavailable, problem_wsgi_response
from target_app.idempotency.context import CONTEXT_ENVIRON, IdempotencyContext
from target_app.idempotency.endpoints import requires_idempotency_key
from target_app.idempotency.fingerprint import fingerprint
from target_app.idempotency.store import Begin, Headers, IdempotencyStore
from target_app.tenants import tenant_of, valid_token
from target_app.validation import IncompleteBody, read_body

if TYPE_CHECKING:
    from types import TracebackType

    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

    ExcInfo = tuple[type[BaseException], BaseException, TracebackType] | tuple[None, None, None]

log = logging.getLogger(__name__)

MAX_KEY_LENGTH = 255
REPLAY_HEADER = ("Idempotent-Replayed", "true")
# The one scope every tenant shares under the `api-tenant` negative control (a real
# tenant is never empty).
SHARED_TENANT_SCOPE = ""
# The fingerprint every request has under the `api-fingerprint` negative control.
IGNORED_FINGERPRINT = "-"
# Pauses between attempts to record a finished response (None: give up).
FINISH_RETRY_PAUSES = (0.05, 0.2, None)
# Headers of the original response worth replaying (hop-by-hop and dates are not).
STORED_HEADERS = frozenset({"content-type", "location"})


class _Captured:
    """The app's response, held back until the layer has recorded it."""

    def __init__(self) -> None:
        self.status = ""
        self.headers: Headers = []
        self.early: list[bytes] = []

    def start_response(self, status: str, headers: Headers,
                       exc_info: ExcInfo | None = None) -> Callable[[bytes], object]:
        self.status, self.headers = status, headers
        return self.early.append


class IdempotencyMiddleware:
    """Wraps a WSGI app; Werkzeug style (see the module docstring)."""

    def __init__(self, app: WSGIApplication, *, store: IdempotencyStore, ttl_seconds: int,
                 lease_seconds: int, max_body_bytes: int,
                 applies: Callable[[str, str], bool] = requires_idempotency_key,
                 ignore_fingerprint: bool = False, tenant_scoped: bool = True,
                 accept_incomplete: bool = False, crash_points: CrashPoints | None = None) -> None:
        self.app = app
        self.crash_points = crash_points or CrashPoints(None, "app")
        self.store = store
        self.applies = applies
        self.ttl_seconds = ttl_seconds
        self.lease_seconds = lease_seconds
        self.max_body_bytes = max_body_bytes
        self.ignore_fingerprint = ignore_fingerprint
        self.tenant_scoped = tenant_scoped
        self.accept_incomplete = accept_incomplete

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET"))
        path = str(environ.get("PATH_INFO", ""))
        if not self.applies(method, path):
            return self.app(environ, start_response)
        try:
            return self._handle(environ, start_response, method, path)
        except Problem as problem:
            return problem_wsgi_response(problem, start_response)
        except CrashPointError as exc:
            return problem_wsgi_response(Problem(
                503, "Service unavailable", str(exc), type_="/problems/transient-error",
                headers={"Retry-After": "1"}), start_response)

    def _handle(self, environ: WSGIEnvironment, start_response: StartResponse, method: str,
                path: str) -> Iterable[bytes]:
        key = environ.get("HTTP_IDEMPOTENCY_KEY")
        if key is None:
            raise Problem(400, "Missing Idempotency-Key",
                          "this endpoint requires an Idempotency-Key header",
                          type_="/problems/missing-idempotency-key")
        if not isinstance(key, str) or not valid_token(key, max_length=MAX_KEY_LENGTH):
            raise Problem(400, "Invalid Idempotency-Key",
                          f"the key must be 1-{MAX_KEY_LENGTH} printable ASCII characters",
                          type_="/problems/invalid-idempotency-key")
        request_tenant = tenant_of(environ)  # a malformed header is refused either way
        tenant = request_tenant if self.tenant_scoped else SHARED_TENANT_SCOPE
        body = self._read_body(environ)
        digest = IGNORED_FINGERPRINT if self.ignore_fingerprint else fingerprint(method, path, body)
        found = self._begin(tenant, key, digest)
        if found.outcome == "replay":
            headers = [*found.headers, ("Content-Length", str(len(found.body))), REPLAY_HEADER]
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

    def _run(self, environ: WSGIEnvironment, start_response: StartResponse,
             context: IdempotencyContext, token: str, body: bytes) -> Iterable[bytes]:
        tenant, key = context.tenant, context.key
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        environ[CONTEXT_ENVIRON] = context
        captured = _Captured()
        try:
            self.crash_points.reach("api.after_claim")
            result = self.app(environ, captured.start_response)
            try:
                chunks = [*captured.early, *result]
            finally:
                close = getattr(result, "close", None)
                if callable(close):
                    close()
        except BaseException:
            self._release(tenant, key, token)
            raise
        response_body = b"".join(chunks)
        try:
            self.crash_points.reach("api.after_domain")
        except CrashPointError:
            self._release(tenant, key, token)
            raise
        if context.release_requested:
            # The handler refused the request on behalf of this layer (a recovery
            # point of another fingerprint): answer, but leave the key free.
            self._release(tenant, key, token)
            start_response(captured.status, captured.headers)
            return [response_body]
        status_code = int(captured.status.split(" ", 1)[0])
        stored = [(name, value) for name, value in captured.headers if name.lower() in STORED_HEADERS]
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
        if self.crash_points.reach("api.after_store"):
            drop_reply(environ)
        start_response(captured.status, captured.headers)
        return [response_body]

    def _finish_with_retries(self, tenant: str, key: str, token: str, status: int,
                             headers: Headers, body: bytes) -> None:
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

    def _begin(self, tenant: str, key: str, digest: str) -> Begin:
        try:
            return self.store.begin(tenant, key, digest, lease_seconds=self.lease_seconds)
        except StoreUnavailable as exc:
            raise Problem(503, "Store unavailable", "the idempotency store cannot be reached",
                          type_="/problems/store-unavailable", headers={"Retry-After": "1"}) from exc

    def _read_body(self, environ: WSGIEnvironment) -> bytes:
        try:
            return read_body(environ, self.max_body_bytes, allow_incomplete=self.accept_incomplete)
        except IncompleteBody:
            try:
                self.store.count("api_incomplete_bodies")
            except StoreUnavailable:
                pass  # the 400 matters more than the counter
            raise


def _status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"
