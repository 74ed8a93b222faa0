"""The Toxiproxy 2.12 HTTP API over a collection of proxies, independent of HTTP
parsing: `handle(method, path, body)` returns a `Response`."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from harness.toxiproxy.errors import (
    PROXY_EXISTS,
    PROXY_NOT_FOUND,
    ApiError,
    api_error,
    bad_request_body,
    missing_field,
)
from harness.toxiproxy.proxy import Proxy

VERSION = "2.12.0"


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: str | None = "application/json"


def _json(status: int, value: Any) -> Response:
    return Response(status, json.dumps(value).encode())


def _error(exc: ApiError, **extra: Any) -> Response:
    # Go writes these through http.Error, which appends a newline.
    payload = {"error": exc.message, "status": exc.status, **extra}
    return Response(exc.status, json.dumps(payload).encode() + b"\n")


_NOT_FOUND = Response(404, b"404 page not found\n", "text/plain; charset=utf-8")
_METHOD_NOT_ALLOWED = Response(405, b"", None)
_SEGMENT = r"([^/]+)"
_ROUTES: list[tuple[re.Pattern[str], dict[str, str]]] = [
    (re.compile(r"/reset"), {"POST": "reset"}),
    (re.compile(r"/version"), {"GET": "version"}),
    (re.compile(r"/populate"), {"POST": "populate"}),
    (re.compile(r"/proxies"), {"GET": "proxy_index", "POST": "proxy_create"}),
    (
        re.compile(rf"/proxies/{_SEGMENT}"),
        {"GET": "proxy_show", "POST": "proxy_update", "PATCH": "proxy_update", "DELETE": "proxy_delete"},
    ),
    (re.compile(rf"/proxies/{_SEGMENT}/toxics"), {"GET": "toxic_index", "POST": "toxic_create"}),
    (
        re.compile(rf"/proxies/{_SEGMENT}/toxics/{_SEGMENT}"),
        {"GET": "toxic_show", "POST": "toxic_update", "PATCH": "toxic_update", "DELETE": "toxic_delete"},
    ),
]


def _decode(body: bytes) -> Any:
    if not body.strip():
        raise bad_request_body("EOF")
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad_request_body(str(exc)) from None


def _proxy_fields(body: Any, *, listen: str, upstream: str, enabled: bool | None) -> dict[str, Any]:
    """Decode a proxy body over defaults, rejecting wrong JSON types as Go does."""
    if not isinstance(body, dict):
        raise bad_request_body("json: cannot unmarshal non-object into Go value of type toxiproxy.Proxy")
    fields: dict[str, Any] = {"name": "", "listen": listen, "upstream": upstream, "enabled": enabled}
    for key, kind in (("name", str), ("listen", str), ("upstream", str), ("enabled", bool)):
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, kind):
            go_type = "string" if kind is str else "bool"
            raise bad_request_body(f"json: cannot unmarshal {type(value).__name__} into Go struct field Proxy.{key} of type {go_type}")
        fields[key] = value
    return fields


class ToxiproxyApi:
    """All proxies of one server, and the API over them. Runs on one event loop."""

    def __init__(self) -> None:
        self.proxies: dict[str, Proxy] = {}
        # API calls that start or stop listeners await; serialising them keeps
        # two concurrent requests from racing on the same name or port.
        self._lock = asyncio.Lock()

    async def handle(self, method: str, path: str, body: bytes) -> Response:
        for pattern, methods in _ROUTES:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            handler_name = methods.get(method)
            if handler_name is None:
                return _METHOD_NOT_ALLOWED
            args = [unquote(group) for group in match.groups()]
            async with self._lock:
                try:
                    return await getattr(self, "_" + handler_name)(*args, body=body)
                except ApiError as exc:
                    return _error(exc)
                except Exception as exc:  # noqa: BLE001 - a bug must not kill the server
                    return _error(ApiError(f"internal error: {exc!r}", 500))
        return _NOT_FOUND

    async def close(self) -> None:
        for proxy in list(self.proxies.values()):
            await proxy.stop()
        self.proxies.clear()

    def _proxy(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise api_error(PROXY_NOT_FOUND)
        return proxy

    # -- handlers ---------------------------------------------------------------
    async def _version(self, *, body: bytes) -> Response:
        return Response(200, f'{{"version": "{VERSION}"}}\n'.encode(), "application/json;charset=utf-8")

    async def _reset(self, *, body: bytes) -> Response:
        for proxy in self.proxies.values():
            await proxy.start()
            proxy.toxics.reset()
        return Response(204, b"", None)

    async def _proxy_index(self, *, body: bytes) -> Response:
        return _json(200, {name: proxy.to_json() for name, proxy in self.proxies.items()})

    async def _proxy_create(self, *, body: bytes) -> Response:
        fields = _proxy_fields(_decode(body), listen="", upstream="", enabled=True)
        if not fields["name"]:
            raise missing_field("name")
        if not fields["upstream"]:
            raise missing_field("upstream")
        if fields["name"] in self.proxies:
            raise api_error(PROXY_EXISTS)
        proxy = Proxy(fields["name"], fields["listen"], fields["upstream"])
        if fields["enabled"]:
            await proxy.start()
        self.proxies[proxy.name] = proxy
        return _json(201, proxy.to_json())

    async def _populate(self, *, body: bytes) -> Response:
        try:
            entries = _decode(body)
            if not isinstance(entries, list):
                raise bad_request_body("json: cannot unmarshal object into Go value of type []struct")
            wanted = []
            names: set[str] = set()
            for number, entry in enumerate(entries, start=1):
                fields = _proxy_fields(entry, listen="", upstream="", enabled=None)
                if not fields["name"]:
                    raise missing_field(f"name at proxy {number}")
                if not fields["upstream"]:
                    raise missing_field(f"upstream at proxy {number}")
                if fields["name"] in names:
                    raise ApiError(f'duplicate proxy name "{fields["name"]}"', 500)
                names.add(fields["name"])
                wanted.append(fields)
        except ApiError as exc:
            return _error(exc, proxies=None)
        applied: list[Proxy] = []
        for fields in wanted:
            try:
                applied.append(await self._add_or_replace(fields))
            except ApiError as exc:
                return _error(exc, proxies=[proxy.to_json() for proxy in applied] or None)
        return _json(201, {"proxies": [proxy.to_json() for proxy in applied]})

    async def _add_or_replace(self, fields: dict[str, Any]) -> Proxy:
        existing = self.proxies.get(fields["name"])
        if existing is not None:
            if existing.listen == fields["listen"] and existing.upstream == fields["upstream"]:
                return existing  # unchanged: kept with its toxics and connections
            await existing.stop()
            del self.proxies[existing.name]
        proxy = Proxy(fields["name"], fields["listen"], fields["upstream"])
        if fields["enabled"] is not False:
            await proxy.start()
        self.proxies[proxy.name] = proxy
        return proxy

    async def _proxy_show(self, name: str, *, body: bytes) -> Response:
        return _json(200, self._proxy(name).to_json())

    async def _proxy_update(self, name: str, *, body: bytes) -> Response:
        proxy = self._proxy(name)
        fields = _proxy_fields(_decode(body), listen=proxy.listen, upstream=proxy.upstream, enabled=proxy.enabled)
        if fields["listen"] != proxy.listen or fields["upstream"] != proxy.upstream:
            await proxy.stop()
            proxy.retarget(fields["listen"], fields["upstream"])
            if fields["enabled"]:
                await proxy.start()
        elif fields["enabled"] and not proxy.enabled:
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
