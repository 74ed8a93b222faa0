"""A proxy: its listener, its open connections and its toxic collection."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
from collections.abc import Callable
from typing import Any

from harness.toxiproxy.errors import TOXIC_EXISTS, TOXIC_NOT_FOUND, ApiError, api_error
from harness.toxiproxy.link import Connection, Side
from harness.toxiproxy.toxics import Toxic, parse_new_attributes, parse_new_toxic, parse_update

_BACKLOG = 1024


def split_address(address: str) -> tuple[str, int]:
    """'host:port' (host may be empty or a [v6] literal) -> (host, port).
    Errors are worded like Go's net package, since clients may show them."""
    host, sep, port_text = address.rpartition(":")
    if not sep:
        raise ValueError(f"address {address}: missing port in address")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"address {address}: too many colons in address")
    try:
        port = int(port_text) if port_text else 0
    except ValueError:
        raise ValueError(f"address {address}: unknown port") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"address {address}: invalid port")
    return host, port


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ToxicCollection:
    """The ordered toxic chains of one proxy. Names are unique across both streams."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self.upstream: list[Toxic] = []
        self.downstream: list[Toxic] = []
        self._on_change = on_change

    def all(self) -> list[Toxic]:
        return self.upstream + self.downstream

    def find(self, name: str) -> Toxic | None:
        for toxic in self.upstream:
            if toxic.name == name:
                return toxic
        for toxic in self.downstream:
            if toxic.name == name:
                return toxic
        return None

    def get(self, name: str) -> Toxic:
        toxic = self.find(name)
        if toxic is None:
            raise api_error(TOXIC_NOT_FOUND)
        return toxic

    def add(self, body: Any) -> Toxic:
        toxic = parse_new_toxic(body)
        if self.find(toxic.name) is not None:
            raise api_error(TOXIC_EXISTS)
        parse_new_attributes(toxic, body)
        (self.upstream if toxic.upstream else self.downstream).append(toxic)
        self._on_change()
        return toxic

    def update(self, name: str, body: Any) -> Toxic:
        toxic = self.get(name)
        attributes, toxicity = parse_update(toxic, body)
        toxic.attributes = attributes
        toxic.toxicity = toxicity
        toxic.revision += 1
        self._on_change()
        return toxic

    def remove(self, name: str) -> None:
        toxic = self.get(name)
        (self.upstream if toxic.upstream else self.downstream).remove(toxic)
        self._on_change()

    def reset(self) -> None:
        self.upstream = []
        self.downstream = []
        self._on_change()


class Proxy:
    """A listener that forwards every accepted connection to `upstream`."""

    def __init__(self, name: str, listen: str, upstream: str) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics = ToxicCollection(self._toxics_changed)
        self.connections: set[Connection] = set()
        self._server: asyncio.AbstractServer | None = None
        self._upstream_address: tuple[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "toxics": [toxic.to_json() for toxic in self.toxics.all()],
        }

    def upstream_address(self) -> tuple[str, int]:
        if self._upstream_address is None:
            self._upstream_address = split_address(self.upstream)
        return self._upstream_address

    def retarget(self, listen: str, upstream: str) -> None:
        """New addresses for a stopped proxy; they apply at the next start."""
        self.listen = listen
        self.upstream = upstream
        self._upstream_address = None

    def _toxics_changed(self) -> None:
        for connection in list(self.connections):
            connection.refresh()

    async def start(self) -> None:
        """Listen on `listen`; raises ApiError 500 with Go's wording on failure."""
        if self._server is not None:
            return
        try:
            host, port = split_address(self.listen)
        except ValueError as exc:
            raise ApiError(f"listen tcp: {exc}", 500) from None
        sock = await self._bind(host, port)
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(lambda: Side(Connection(self), True), sock=sock)
        except OSError as exc:
            sock.close()
            raise ApiError(f"listen tcp {self.listen}: {exc.strerror or exc}", 500) from None
        bound = sock.getsockname()
        self.listen = format_address(bound[0], bound[1])
        self._upstream_address = None
        self.enabled = True

    async def _bind(self, host: str, port: int) -> socket.socket:
        loop = asyncio.get_running_loop()
        if host == "":
            # Like Go, an empty host means every interface (dual-stack when possible).
            candidates = [(socket.AF_INET6, ("::", port)), (socket.AF_INET, ("0.0.0.0", port))]
        else:
            try:
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            except socket.gaierror as exc:
                raise ApiError(f"listen tcp {self.listen}: lookup {host}: {exc.strerror}", 500) from None
            # Prefer IPv4, as Go does for "localhost".
            infos.sort(key=lambda info: info[0] != socket.AF_INET)
            candidates = [(info[0], info[4][:2]) for info in infos[:1]]
        last: OSError | None = None
        for family, address in candidates:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and address[0] == "::":
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                sock.bind(address)
                sock.listen(_BACKLOG)
                sock.setblocking(False)
                return sock
            except OSError as exc:
                sock.close()
                last = exc
        code = last.errno if last is not None else errno.EINVAL
        raise ApiError(f"listen tcp {self.listen}: bind: {os.strerror(code or errno.EINVAL).lower()}", 500)

    async def stop(self) -> None:
        """Close the listener and cut every open connection."""
        server, self._server = self._server, None
        self.enabled = False
        if server is not None:
            server.close()
        for connection in list(self.connections):
            connection.close(abort=True)
        if server is not None:
            # Closing the listening socket is enough; waiting for connections
            # (wait_closed in 3.12+) is not needed since they were all cut above.
            await asyncio.sleep(0)
