"""The recording HTTP channel: one request = one invoke and exactly one completion.

Classification (docs/internals.md): 2xx → ok (replays included, marked), 4xx →
fail, anything else → info: 5xx, timeout, reset, truncated body, unparsable 2xx
body, or an unexpected status. The fingerprint is taken over exactly the bytes
sent and the digest over exactly the bytes received. A 2xx completion carries an
`answer` summary of its body and a problem answer its `problem_type`, so the
checker can tell an answer that contradicts the request from a right one.

Every request is also reported to Locust's statistics, so Locust's CSV and HTML
mean something: `info` is a Locust failure, and so is an answer that contradicts
what the client meant to provoke (a deliberate duplicate accepted, or refused
with another status than the documented one, or a plain request rejected).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import requests
from locust.event import Events

from harness.history import (
    DEFAULT_TENANT,
    REJECT_STATUS,
    Client,
    answer_summary,
    body_digest,
    problem_type,
)
from harness.load.recording import Completion, recorded_operation
from harness.load.signing import fingerprint
from harness.names import ORDER_ID

TENANT_HEADER = "X-Tenant-ID"


@dataclass(frozen=True)
class Reply:
    """What one recorded request came back with."""

    completion: str  # "ok" | "fail" | "info"
    status: int | None
    data: Any  # the parsed JSON body, or None
    replayed: bool
    retry_after: bool  # a 409 with Retry-After: the first request is still running
    error: str | None


class ExpectationMismatch(Exception):
    """Reported to Locust when a reply contradicts what the request meant to provoke."""


class HttpChannel:
    """Requests to the target app for one client, optionally on a fresh TCP connection each.

    Toxiproxy decides a toxic's toxicity per connection, so fault scenarios want a
    new connection per request (`fresh_connections`, the default).
    """

    def __init__(self, base_url: str, events: Events, *, timeout: float,
                 fresh_connections: bool = True,
                 toxic_hit: Callable[[], bool | None] = lambda: None) -> None:
        self.base_url = base_url.rstrip("/")
        self.toxic_hit = toxic_hit
        self.events = events
        self.timeout = timeout
        self.fresh_connections = fresh_connections
        self.session = requests.Session()

    def post(self, client: Client, op: str, path: str, payload: dict[str, Any] | bytes, *,
             tenant: str, headers: dict[str, str] | None = None,
             fields: dict[str, Any] | None = None, expect: str | None = None,
             timeout: float | None = None) -> Reply:
        """POST `payload` (JSON, or bytes sent as they are) and record it."""
        body = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        return self.request(client, op, "POST", path, body, tenant=tenant, headers=headers,
                            fields=fields, expect=expect, timeout=timeout)

    def get(self, client: Client, op: str, path: str, *, tenant: str,
            fields: dict[str, Any] | None = None, expect: str | None = None) -> Reply:
        return self.request(client, op, "GET", path, None, tenant=tenant, fields=fields,
                            expect=expect)

    def request(
        self,
        client: Client,
        op: str,
        method: str,
        path: str,
        body: bytes | None,
        *,
        tenant: str,
        headers: dict[str, str] | None = None,
        fields: dict[str, Any] | None = None,
        expect: str | None = None,
        timeout: float | None = None,
    ) -> Reply:
        """Send one request as `tenant` and record it: invoke, then one completion.

        `fields` go into the invoke record. The tenant header is sent for every
        tenant but `default` (what the app assumes without one), so the record's
        `tenant` is always the tenant the app saw.
        """
        send_headers = {"Content-Type": "application/json"} if body is not None else {}
        if tenant != DEFAULT_TENANT:
            send_headers[TENANT_HEADER] = tenant
        send_headers.update(headers or {})
        toxic_hit = self.toxic_hit() if self.fresh_connections else None

        def call() -> Completion[Reply]:
            try:
                response = self.session.request(
                    method, self.base_url + path, data=body, headers=send_headers,
                    timeout=self.timeout if timeout is None else timeout,
                )
                raw = response.content
            finally:
                if self.fresh_connections:
                    # Dropping the pool closes the socket, so the next request dials anew.
                    self.session.close()
            reply = _classify(response, raw)
            completion_fields: dict[str, Any] = {
                "status": response.status_code,
                "body_digest": body_digest(raw),
                "replayed": reply.replayed,
                "error": reply.error,
                "toxic_hit": toxic_hit,
            }
            if reply.completion == "ok":
                completion_fields["answer"] = answer_summary(op, reply.data)
            elif _is_problem(response):
                completion_fields["problem_type"] = problem_type(reply.data)
            if op == "create_order" and reply.completion == "ok":
                completion_fields[ORDER_ID] = _order_id(reply.data)
            return Completion(reply.completion, reply, completion_fields, len(raw),
                              _locust_failure(expect, reply))

        recorded = recorded_operation(
            client, self.events, call, op=op, request_type=method,
            name=op if expect is None else f"{op} [{expect}]", tenant=tenant, expect=expect,
            fields={"fingerprint": fingerprint(method, path, body or b""), **(fields or {})},
            unanswered={"status": None, "body_digest": None, "replayed": False, "toxic_hit": toxic_hit},
        )
        if recorded.value is None:
            # Whatever broke between sending and a complete answer, the request may
            # have taken effect: info.
            return Reply("info", None, None, False, False, recorded.error)
        return recorded.value

    def close(self) -> None:
        self.session.close()


def _locust_failure(expect: str | None, reply: Reply) -> Exception | None:
    """What Locust counts as this answer's failure: an indeterminate one, or one that
    contradicts what the request meant to provoke."""
    wanted = REJECT_STATUS.get(expect) if expect is not None else None
    if reply.completion == "info":
        return ExpectationMismatch(reply.error or f"indeterminate (status {reply.status})")
    if wanted is not None and reply.completion == "ok":
        return ExpectationMismatch(f"{expect}: accepted with {reply.status}, expected {wanted}")
    if wanted is not None and reply.status != wanted:
        return ExpectationMismatch(f"{expect}: refused with {reply.status}, expected {wanted}")
    if wanted is None and reply.completion == "fail" and expect is None:
        return ExpectationMismatch(f"rejected with {reply.status}")
    return None


def _classify(response: requests.Response, raw: bytes) -> Reply:
    status = response.status_code
    replayed = response.headers.get("Idempotent-Replayed", "").lower() == "true"
    data: Any = None
    try:
        data = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        if 200 <= status < 300:
            return Reply("info", status, None, replayed, False, "unparsable 2xx body")
    if 200 <= status < 300:
        return Reply("ok", status, data, replayed, False, None)
    if 400 <= status < 500:
        retry_after = status == 409 and "Retry-After" in response.headers
        return Reply("fail", status, data, replayed, retry_after, None)
    return Reply("info", status, data, replayed, False, f"HTTP {status}")


def _is_problem(response: requests.Response) -> bool:
    # RFC 9457 bodies only: a 4xx/5xx from a proxy or a stub may be anything else.
    content_type = response.headers.get("Content-Type", "")
    return content_type.split(";", 1)[0].strip().lower() == "application/problem+json"


def _order_id(data: Any) -> str | None:
    if isinstance(data, dict):
        value = data.get("id")
        return value if isinstance(value, str) else None
    return None

