"""A proxy: its listener, its open connections and its toxic collection, and
listen addresses resolved the way Go's net package resolves them.

A listen address is kept as Toxiproxy keeps it: as sent until the proxy starts,
then the address actually bound (`127.0.0.1:7070` for `localhost:7070`, `[::]:N`
for an empty host, `0.0.0.0` or `::`, which all listen on every interface).
Whether a new listen address "differs" is decided on its resolved form, so
`localhost:7070` is the same as a proxy on `127.0.0.1:7070`.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.toxiproxy.errors import TOXIC_EXISTS, TOXIC_NOT_FOUND, ApiError, api_error
from harness.toxiproxy.link import Connection, CountingSide, Side
from harness.toxiproxy.steps import StepWatch
from harness.toxiproxy.toxics import Toxic, parse_new_attributes, parse_new_toxic, parse_update

if TYPE_CHECKING:
    from harness.toxiproxy.metrics import ProxyCounters

_BACKLOG = 1024
_WILDCARDS = ("", "0.0.0.0", "::")


def split_address(address: str) -> tuple[str, int]:
    """'host:port' (host may be empty or a [v6] literal) -> (host, port); an empty
    address is ("", 0), any port on every interface, as for Go's net.Listen.
    Errors are worded like Go's net package, since clients may show them."""
    if address == "":
        return "", 0
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


def _ip_text(host: str) -> str | None:
    """An IP literal as Go prints it (v4-mapped v6 as dotted v4), else None."""
    literal, _, zone = host.partition("%")
    try:
        ip = ipaddress.ip_address(literal)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return f"{ip}%{zone}" if zone else str(ip)


async def resolve_address(address: str) -> tuple[str, int]:
    """(ip, port) as Go's net.ResolveTCPAddr("tcp", address) finds it: ip is ""
    for an empty host; a name resolves to its first IPv4 address when it has one.
    Raises ValueError worded like Go's errors (without an operation prefix)."""
    host, port = split_address(address)
    if host == "":
        return "", port
    ip = _ip_text(host)
    if ip is not None:
        return ip, port
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        reason = "no such host" if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", None)) else exc.strerror
        raise ValueError(f"lookup {host}: {reason}") from None
    if not infos:
        raise ValueError(f"lookup {host}: no such host")
    infos.sort(key=lambda info: info[0] != socket.AF_INET)  # IPv4 first, as Go does
    return str(infos[0][4][0]), port


async def resolved_listen(address: str) -> str:
    """The text Go compares a proxy's listen address with: ResolveTCPAddr(...).String()
    (":0" for an empty address, "127.0.0.1:7070" for "localhost:7070")."""
    ip, port = await resolve_address(address)
    return format_address(ip, port)


def _bind(ip: str, port: int) -> socket.socket:
    """A listening socket on ip:port, bound as Go's net.Listen binds it: a wildcard
    host listens dual-stack on [::] where IPv6 exists, else on 0.0.0.0."""
    if ip in _WILDCARDS:
        attempts = [(socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")]
    else:
        attempts = [(socket.AF_INET6 if ":" in ip else socket.AF_INET, ip)]
    for index, (family, host) in enumerate(attempts):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            if index + 1 < len(attempts):
                continue  # no IPv6 here: the IPv4 wildcard instead
            raise
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and host == "::":
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((host, port))
            sock.listen(_BACKLOG)
            sock.setblocking(False)
            return sock
        except OSError as exc:
            sock.close()
            if index + 1 < len(attempts) and exc.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
                continue
            raise
    raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))  # not reached: the last attempt raises


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

    def __init__(self, name: str, listen: str, upstream: str, counters: ProxyCounters | None = None) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics = ToxicCollection(self._toxics_changed)
        self.connections: set[Connection] = set()
        # With proxy metrics on, sides count bytes and closed connections are
        # folded into the server's totals; without, nothing on the data path pays.
        self.counters = counters
        self.side_class: type[Side] = Side if counters is None else CountingSide
        self._server: asyncio.AbstractServer | None = None
        self._upstream_address: tuple[str, int] | None = None
        # Steps seen on the wire (harness.toxiproxy.steps): None, the default, is a
        # plain proxy; connections opened while it is set are parsed.
        self.wire: StepWatch | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            # Toxiproxy's Proxy struct exports its zerolog Logger without a JSON tag,
            # and a Logger has no exported fields: every proxy it prints has this.
            "Logger": {},
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

    def connection_closed(self, connection: Connection) -> None:
        self.connections.discard(connection)
        if self.counters is not None:
            self.counters.fold(connection)

    async def differs(self, listen: str, upstream: str) -> bool:
        """Would these addresses change the proxy? The listen address is compared
        resolved (Toxiproxy's Differs); raises ApiError 500 if it does not resolve."""
        try:
            resolved = await resolved_listen(listen)
        except ValueError as exc:
            raise ApiError(str(exc), 500) from None
        return resolved != self.listen or upstream != self.upstream

    async def start(self) -> None:
        """Listen on `listen`; raises ApiError 500 with Go's wording on failure
        (`listen tcp 127.0.0.1:3310: bind: address already in use`, naming the
        resolved address)."""
        if self._server is not None:
            return
        try:
            ip, port = await resolve_address(self.listen)
        except ValueError as exc:
            raise ApiError(f"listen tcp: {exc}", 500) from None
        try:
            sock = _bind(ip, port)
        except OSError as exc:
            reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            raise ApiError(f"listen tcp {format_address(ip, port)}: bind: {reason}", 500) from None
        loop = asyncio.get_running_loop()
        side_class = self.side_class
        try:
            self._server = await loop.create_server(lambda: side_class(Connection(self), True), sock=sock)
        except OSError as exc:
            sock.close()
            raise ApiError(f"listen tcp {format_address(ip, port)}: {exc.strerror or exc}", 500) from None
        bound = sock.getsockname()
        self.listen = format_address(bound[0], bound[1])
        self._upstream_address = None
        self.enabled = True

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
