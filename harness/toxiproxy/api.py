"""The Toxiproxy 2.12 HTTP API over a collection of proxies, independent of HTTP
parsing: `handle(Request)` returns a `Response`.

The answers are shaped as the Go server's: JSON bodies compact as Go's encoder
writes them (`application/json`, no trailing newline; proxy indexes sorted by
name); errors go through Go's `http.Error`, so they are `text/plain;
charset=utf-8` with `X-Content-Type-Options: nosniff` and a newline after the
JSON (except `/populate`, which writes its error as JSON); every request that
matches a route gets an `X-Toxiproxy-Request-Id` (an unmatched path or method is
answered by the router before that middleware, without one, as in Go).

The harness's own extension lives under `/harness/` (no Toxiproxy client sends
there): steps seen on the wire and step faults (harness.toxiproxy.steps), per proxy:
  GET/POST /harness/proxies/{name}/wire      the watch; POST {"protocol": "redis",
                                             "role": "app"} (or "postgres")
                                             switches parsing on, {"protocol": null} off
  GET/DELETE /harness/proxies/{name}/steps   step counts; DELETE zeroes them
  GET/POST /harness/proxies/{name}/triggers  step faults; POST {"action": "before",
                                             "step": "redis INCR counter app",
                                             "occurrence": 1, "duration_ms": 0} arms one
  DELETE /harness/proxies/{name}/triggers/{id} disarms one not fired yet (a fired
                                             one stays, with its record: 409)
Bad fields answer 400 with {"error": ..., "status": 400}; a proxy without a watch
answers 409 on steps and triggers.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import random
import re
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, unquote

from harness.toxiproxy import godecode, gojson
from harness.toxiproxy.errors import (
    PROXY_EXISTS,
    PROXY_NOT_FOUND,
    ApiError,
    api_error,
    bad_request_body,
    missing_field,
)
from harness.toxiproxy.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from harness.toxiproxy.metrics import ServerMetrics
from harness.toxiproxy.proxy import Proxy
from harness.toxiproxy.steps import StepConfigError, StepWatch

VERSION = "2.12.0"
TEXT_PLAIN = "text/plain; charset=utf-8"
_NOSNIFF = (("X-Content-Type-Options", "nosniff"),)


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # as sent, before percent-decoding
    body: bytes = b""
    user_agent: str = ""
    accept_encoding: str = ""
    query: str = ""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str | None = "application/json"
    headers: tuple[tuple[str, str], ...] = field(default=())


def _json(status: int, value: Any) -> Response:
    return Response(status, gojson.dumps(value))


def _http_error(status: int, text: str) -> Response:
    """What Go's http.Error writes: the text and a newline, as plain text."""
    return Response(status, text.encode() + b"\n", TEXT_PLAIN, _NOSNIFF)


def _error(exc: ApiError) -> Response:
    return _http_error(exc.status, gojson.dumps({"error": exc.message, "status": exc.status}).decode())


_NOT_FOUND = _http_error(404, "404 page not found")
_METHOD_NOT_ALLOWED = Response(405, b"", None)
_SEGMENT = r"([^/]+)"
_ANY = "*"  # a route that takes every method (Toxiproxy's /metrics)
_ROUTES: tuple[tuple[re.Pattern[str], dict[str, str]], ...] = (
    (re.compile(r"/reset"), {"POST": "reset"}),
    (re.compile(r"/proxies"), {"GET": "proxy_index", "POST": "proxy_create"}),
    (re.compile(r"/populate"), {"POST": "populate"}),
    (
        re.compile(rf"/proxies/{_SEGMENT}"),
        {"GET": "proxy_show", "POST": "proxy_update", "PATCH": "proxy_update", "DELETE": "proxy_delete"},
    ),
    (re.compile(rf"/proxies/{_SEGMENT}/toxics"), {"GET": "toxic_index", "POST": "toxic_create"}),
    (
        re.compile(rf"/proxies/{_SEGMENT}/toxics/{_SEGMENT}"),
        {"GET": "toxic_show", "POST": "toxic_update", "PATCH": "toxic_update", "DELETE": "toxic_delete"},
    ),
    (re.compile(r"/version"), {"GET": "version"}),
    (re.compile(rf"/harness/proxies/{_SEGMENT}/wire"), {"GET": "wire_show", "POST": "wire_set"}),
    (re.compile(rf"/harness/proxies/{_SEGMENT}/steps"), {"GET": "steps_show", "DELETE": "steps_reset"}),
    (re.compile(rf"/harness/proxies/{_SEGMENT}/triggers"), {"GET": "triggers_show", "POST": "trigger_arm"}),
    (re.compile(rf"/harness/proxies/{_SEGMENT}/triggers/{_SEGMENT}"), {"DELETE": "trigger_disarm"}),
)
_METRICS_ROUTE = (re.compile(r"/metrics"), {_ANY: "metrics"})


def clean_path(path: str) -> str:
    """The canonical form gorilla/mux redirects to: Go's path.Clean (no empty or
    "." segments, ".." resolved), keeping a trailing slash."""
    segments: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if segments:
                segments.pop()
            continue
        segments.append(segment)
    cleaned = "/" + "/".join(segments)
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


class RequestIds:
    """Request ids shaped like the xid values Go's hlog puts in
    X-Toxiproxy-Request-Id: 20 base32hex characters over 4 bytes of time, 3 of
    machine, 2 of pid and a 3-byte counter."""

    def __init__(self) -> None:
        self._machine = os.urandom(3)
        self._pid = struct.pack(">H", os.getpid() & 0xFFFF)
        self._counter = itertools.count(random.getrandbits(24))

    def next(self) -> str:
        raw = struct.pack(">I", int(time.time()) & 0xFFFFFFFF) + self._machine + self._pid
        raw += (next(self._counter) & 0xFFFFFF).to_bytes(3, "big")
        return base64.b32hexencode(raw).decode().rstrip("=").lower()


def _decode(body: bytes) -> Any:
    try:
        return godecode.decode(body)
    except godecode.GoJsonError as exc:
        raise bad_request_body(str(exc)) from None


_PROXY_FIELDS = ("name", "listen", "upstream", "enabled")
# The element type of Toxiproxy's populate body, as Go's errors name it.
_POPULATE_ENTRY = 'struct { toxiproxy.Proxy; Enabled *bool "json:\\"enabled\\"" }'


def _proxy_fields(
    body: Any,
    *,
    listen: str,
    upstream: str,
    enabled: bool | None,
    go_type: str = "toxiproxy.Proxy",
    struct: str = "Proxy",
) -> dict[str, Any]:
    """Decode a proxy body over defaults, rejecting wrong JSON types as Go does."""
    if body is None:
        body = {}  # Go decodes a JSON null into a struct as "no change"
    if not isinstance(body, dict):
        raise bad_request_body(f"json: cannot unmarshal {godecode.kind(body)} into Go value of type {go_type}")
    fields: dict[str, Any] = {"name": "", "listen": listen, "upstream": upstream, "enabled": enabled}
    for key, value in godecode.fold_keys(body, _PROXY_FIELDS).items():
        if value is None:
            continue  # Go leaves a field alone for a JSON null
        expected = bool if key == "enabled" else str
        if not isinstance(value, expected):
            type_name = "bool" if expected is bool else "string"
            raise bad_request_body(
                f"json: cannot unmarshal {godecode.kind(value)} into Go struct field {struct}.{key} of type {type_name}"
            )
        fields[key] = value
    return fields


class ToxiproxyApi:
    """All proxies of one server, and the API over them. Runs on one event loop."""

    def __init__(self, *, proxy_metrics: bool = False, runtime_metrics: bool = False) -> None:
        self.proxies: dict[str, Proxy] = {}
        self.metrics = ServerMetrics(
            lambda: self.proxies.values(), proxy_metrics=proxy_metrics, runtime_metrics=runtime_metrics
        )
        self._routes = _ROUTES + (_METRICS_ROUTE,) if self.metrics.enabled else _ROUTES
        self._request_ids = RequestIds()
        # API calls that start or stop listeners await; serialising them keeps
        # two concurrent requests from racing on the same name or port.
        self._lock = asyncio.Lock()

    async def handle(self, request: Request) -> Response:
        path = unquote(request.path)  # Go's router matches the decoded path
        cleaned = clean_path(path)
        if cleaned != path:
            # gorilla/mux answers an unclean path (`//proxies`, `/a/../proxies`)
            # with a redirect to its clean form, before any route or middleware.
            location = quote(cleaned, safe="/$&+,:;=@") + (f"?{request.query}" if request.query else "")
            return Response(301, b"", None, (("Location", location),))
        for pattern, methods in self._routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            handler_name = methods.get(request.method) or methods.get(_ANY)
            if handler_name is None:
                return _METHOD_NOT_ALLOWED
            response = await self._routed(handler_name, match.groups(), request)
            return replace(response, headers=(("X-Toxiproxy-Request-Id", self._request_ids.next()), *response.headers))
        return _NOT_FOUND

    async def _routed(self, handler_name: str, args: tuple[str, ...], request: Request) -> Response:
        if request.user_agent.startswith("Mozilla/"):
            # Toxiproxy refuses browsers so a web page cannot drive it.
            return _http_error(403, "User agent not allowed")
        if handler_name == "metrics":
            body, gzipped = self.metrics.render(request.accept_encoding)
            headers = (("Content-Encoding", "gzip"),) if gzipped else ()
            return Response(200, body, METRICS_CONTENT_TYPE, headers)
        async with self._lock:
            try:
                # The route table names the handler; every `_<name>` returns a Response.
                handler: Callable[..., Awaitable[Response]] = getattr(self, "_" + handler_name)
                return await handler(*args, body=request.body)
            except ApiError as exc:
                return _error(exc)
            except Exception as exc:  # noqa: BLE001 - a bug must not kill the server
                return _error(ApiError(f"internal error: {exc!r}", 500))

    async def populate(self, body: bytes) -> tuple[list[Proxy], ApiError | None]:
        """Apply a populate body (also used for `-config`): the proxies applied, in
        order, and the error that stopped it, if any."""
        try:
            entries = _decode(body)
            if entries is None:
                entries = []
            if not isinstance(entries, list):
                raise bad_request_body(
                    f"json: cannot unmarshal {godecode.kind(entries)} into Go value of type []{_POPULATE_ENTRY}"
                )
            wanted = []
            for number, entry in enumerate(entries, start=1):
                # Go's populate entries are an anonymous struct: "Go struct field .name".
                fields = _proxy_fields(entry, listen="", upstream="", enabled=None, go_type=_POPULATE_ENTRY, struct="")
                if not fields["name"]:
                    raise missing_field(f"name at proxy {number}")
                if not fields["upstream"]:
                    raise missing_field(f"upstream at proxy {number}")
                wanted.append(fields)
        except ApiError as exc:
            return [], exc
        applied: list[Proxy] = []
        for fields in wanted:
            try:
                applied.append(await self._add_or_replace(fields))
            except ApiError as exc:
                return applied, exc
        return applied, None

    async def close(self) -> None:
        for proxy in list(self.proxies.values()):
            await proxy.stop()
        self.proxies.clear()

    def _proxy(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise api_error(PROXY_NOT_FOUND)
        return proxy

    def _new_proxy(self, name: str, listen: str, upstream: str) -> Proxy:
        return Proxy(name, listen, upstream, self.metrics.counters)

    # -- handlers ---------------------------------------------------------------
    async def _version(self, *, body: bytes) -> Response:
        return Response(200, f'{{"version": "{VERSION}"}}\n'.encode(), "application/json;charset=utf-8")

    async def _reset(self, *, body: bytes) -> Response:
        for proxy in self.proxies.values():
            await proxy.start()
            proxy.toxics.reset()
        return Response(204, b"", None)

    async def _proxy_index(self, *, body: bytes) -> Response:
        # Go marshals a map, whose keys it sorts.
        return _json(200, {name: self.proxies[name].to_json() for name in sorted(self.proxies)})

    async def _proxy_create(self, *, body: bytes) -> Response:
        # A missing or empty listen stays "": Go's net.Listen then takes any free
        # port on every interface, and the answer shows "[::]:PORT".
        fields = _proxy_fields(_decode(body), listen="", upstream="", enabled=True)
        if not fields["name"]:
            raise missing_field("name")
        if not fields["upstream"]:
            raise missing_field("upstream")
        if fields["name"] in self.proxies:
            raise api_error(PROXY_EXISTS)
        proxy = self._new_proxy(fields["name"], fields["listen"], fields["upstream"])
        if fields["enabled"]:
            await proxy.start()
        self.proxies[proxy.name] = proxy
        return _json(201, proxy.to_json())

    async def _populate(self, *, body: bytes) -> Response:
        applied, error = await self.populate(body)
        # Go writes populate's answer as one JSON object, error or not, with the
        # proxies applied so far; an empty list marshals as null.
        payload: dict[str, Any] = {}
        if error is not None:
            payload = {"error": error.message, "status": error.status}
        payload["proxies"] = [proxy.to_json() for proxy in applied] or None
        return _json(201 if error is None else error.status, payload)

    async def _add_or_replace(self, fields: dict[str, Any]) -> Proxy:
        existing = self.proxies.get(fields["name"])
        if existing is not None:
            if not await existing.differs(fields["listen"], fields["upstream"]):
                return existing  # unchanged: kept with its toxics and connections
            # As in Go, the old proxy is stopped first and stays (stopped) if the
            # new one cannot start.
            await existing.stop()
        proxy = self._new_proxy(fields["name"], fields["listen"], fields["upstream"])
        if fields["enabled"] is not False:
            await proxy.start()
        self.proxies[proxy.name] = proxy
        return proxy

    async def _proxy_show(self, name: str, *, body: bytes) -> Response:
        return _json(200, self._proxy(name).to_json())

    async def _proxy_update(self, name: str, *, body: bytes) -> Response:
        proxy = self._proxy(name)
        fields = _proxy_fields(_decode(body), listen=proxy.listen, upstream=proxy.upstream, enabled=proxy.enabled)
        if await proxy.differs(fields["listen"], fields["upstream"]):
            await proxy.stop()
            proxy.retarget(fields["listen"], fields["upstream"])
        if fields["enabled"] and not proxy.enabled:
            await proxy.start()
        elif not fields["enabled"] and proxy.enabled:
            await proxy.stop()
        return _json(200, proxy.to_json())

    async def _proxy_delete(self, name: str, *, body: bytes) -> Response:
        proxy = self._proxy(name)
        await proxy.stop()
        del self.proxies[name]
        return Response(204, b"", None)

    async def _toxic_index(self, name: str, *, body: bytes) -> Response:
        return _json(200, [toxic.to_json() for toxic in self._proxy(name).toxics.all()])

    async def _toxic_create(self, name: str, *, body: bytes) -> Response:
        proxy = self._proxy(name)
        return _json(200, proxy.toxics.add(_decode(body)).to_json())

    async def _toxic_show(self, name: str, toxic: str, *, body: bytes) -> Response:
        return _json(200, self._proxy(name).toxics.get(toxic).to_json())

    async def _toxic_update(self, name: str, toxic: str, *, body: bytes) -> Response:
        proxy = self._proxy(name)
        proxy.toxics.get(toxic)  # 404 before any body error, as Go looks it up first
        return _json(200, proxy.toxics.update(toxic, _decode(body)).to_json())

    async def _toxic_delete(self, name: str, toxic: str, *, body: bytes) -> Response:
        self._proxy(name).toxics.remove(toxic)
        return Response(204, b"", None)

    # -- the harness extension: steps on the wire ------------------------------------
    def _watch(self, name: str) -> StepWatch:
        watch = self._proxy(name).wire
        if watch is None:
            raise ApiError("this proxy does not parse its protocol (POST /harness/proxies/NAME/wire first)", 409)
        return watch

    async def _wire_show(self, name: str, *, body: bytes) -> Response:
        watch = self._proxy(name).wire
        return _json(200, {"protocol": None} if watch is None else watch.to_json())

    async def _wire_set(self, name: str, *, body: bytes) -> Response:
        proxy = self._proxy(name)
        fields = _decode(body)
        if not isinstance(fields, dict):
            raise ApiError("the body is a JSON object", 400)
        protocol = fields.get("protocol")
        if protocol is None:
            proxy.wire = None  # connections opened from now on are plain
            return _json(200, {"protocol": None})
        role = fields.get("role", "app")
        if not isinstance(protocol, str) or not isinstance(role, str):
            raise ApiError("protocol and role are strings", 400)
        try:
            proxy.wire = StepWatch(name, protocol, role)
        except StepConfigError as exc:
            raise ApiError(str(exc), 400) from None
        return _json(200, proxy.wire.to_json())

    async def _steps_show(self, name: str, *, body: bytes) -> Response:
        watch = self._watch(name)
        return _json(200, {"steps": dict(sorted(watch.steps.items())), "unparsed": watch.unparsed, "untracked": watch.untracked})

    async def _steps_reset(self, name: str, *, body: bytes) -> Response:
        self._watch(name).reset_steps()
        return Response(204, b"", None)

    async def _triggers_show(self, name: str, *, body: bytes) -> Response:
        return _json(200, [trigger.to_json() for trigger in self._watch(name).triggers])

    async def _trigger_arm(self, name: str, *, body: bytes) -> Response:
        watch = self._watch(name)
        try:
            trigger = watch.arm(_decode(body))
        except StepConfigError as exc:
            raise ApiError(str(exc), 400) from None
        return _json(201, trigger.to_json())

    async def _trigger_disarm(self, name: str, trigger_id: str, *, body: bytes) -> Response:
        watch = self._watch(name)
        try:
            watch.disarm(int(trigger_id))
        except ValueError:
            raise ApiError(f"no trigger {trigger_id!r} on this proxy", 404) from None
        except StepConfigError as exc:
            raise ApiError(str(exc), 409) from None
        return Response(204, b"", None)
