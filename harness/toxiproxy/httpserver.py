"""A small HTTP/1.1 server on asyncio streams, enough for Toxiproxy's API:
keep-alive, Content-Length and chunked request bodies, `Expect: 100-continue`.
Every answer carries a `Date` header, as Go's net/http adds one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from http import HTTPStatus
from urllib.parse import urlsplit

from harness.toxiproxy.api import Request, Response

Handler = Callable[[Request], Awaitable[Response]]

_MAX_LINE = 16 * 1024
_MAX_HEADERS = 100
_MAX_BODY = 16 * 1024 * 1024


class BadRequest(Exception):
    """The bytes on the wire are not an HTTP request we accept."""


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def render(response: Response, *, keep_alive: bool, date: bool = True) -> bytes:
    lines = [f"HTTP/1.1 {response.status} {_reason(response.status)}"]
    if response.content_type:
        lines.append(f"Content-Type: {response.content_type}")
    lines.extend(f"{name}: {value}" for name, value in response.headers)
    if date:
        lines.append(f"Date: {formatdate(usegmt=True)}")
    if response.status != 204:
        lines.append(f"Content-Length: {len(response.body)}")
    if not keep_alive:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + (response.body if response.status != 204 else b"")


def _split_target(target: str) -> tuple[str, str]:
    """(path, query) of a request target. An origin-form target is split by hand:
    urlsplit would read `//proxies` as a host name."""
    if target.startswith("/"):
        path, _, query = target.partition("?")
        return path, query.partition("#")[0]
    url = urlsplit(target)  # absolute-form, as a proxy-style client sends it
    return url.path or "/", url.query


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise BadRequest("line too long") from None
    if len(line) > _MAX_LINE:
        raise BadRequest("line too long")
    return line


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    for _ in range(1_000_000):
        size_line = (await _read_line(reader)).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise BadRequest("bad chunk size") from None
        if size == 0:
            for _ in range(_MAX_HEADERS):  # trailers up to the blank line
                if (await _read_line(reader)).strip() == b"":
                    return bytes(body)
            raise BadRequest("too many trailers")
        if len(body) + size > _MAX_BODY:
            raise BadRequest("body too large")
        body += await reader.readexactly(size)
        await reader.readexactly(2)
    raise BadRequest("too many chunks")


async def _read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> tuple[str, str, dict[str, str], bytes, bool] | None:
    """(method, path, headers, body, keep_alive), or None at a clean end of stream."""
    try:
        line = await _read_line(reader)
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise BadRequest("truncated request line") from None
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("bad request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for _ in range(_MAX_HEADERS + 1):
        raw = (await _read_line(reader)).decode("latin-1").rstrip("\r\n")
        if raw == "":
            break
        name, sep, value = raw.partition(":")
        if not sep:
            raise BadRequest("bad header")
        headers[name.strip().lower()] = value.strip()
    else:
        raise BadRequest("too many headers")
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    else:
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise BadRequest("bad content-length") from None
        if length < 0 or length > _MAX_BODY:
            raise BadRequest("bad content-length")
        body = await reader.readexactly(length) if length else b""
    return method, target, headers, body, keep_alive


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler) -> None:
    """Answer requests on one connection until the client or an error ends it."""
    try:
        while True:
            try:
                request = await _read_request(reader, writer)
            except BadRequest:
                # Go's server answers a request it cannot parse with this, undated.
                bad = Response(400, b"400 Bad Request", "text/plain; charset=utf-8")
                writer.write(render(bad, keep_alive=False, date=False))
                await writer.drain()
                return
            if request is None:
                return
            method, target, headers, body, keep_alive = request
            path, query = _split_target(target)
            response = await handler(
                Request(method, path, body, headers.get("user-agent", ""), headers.get("accept-encoding", ""), query)
            )
            writer.write(render(response, keep_alive=keep_alive))
            await writer.drain()
            if not keep_alive:
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()
