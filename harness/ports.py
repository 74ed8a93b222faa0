"""Free loopback ports for servers the harness and the tests start.

A port is picked now and bound later, by another process (a proxy, Redis, a node).
Between the two, a port of the kernel's ephemeral range (`ip_local_port_range`,
32768-60999 on Linux by default) may become the local end of any outgoing connection
on the machine, and the server then fails with "address already in use": on a busy
machine running tests in parallel this is a real, repeated failure. So the ports are
drawn at random below that range (from `LOWEST` up), each checked by binding it; only
when that range is exhausted does the OS pick (port 0, inside the ephemeral range).

A port picked at random below that range can still be taken in between by a
neighbour that picked it too (parallel smoke lanes: "port 27139 is already in use").
So a server's owner can *hold* its ports (`hold_ports`): the probe socket stays
bound, never listening, with SO_REUSEADDR set after its exclusive bind. On Linux a
later bind without SO_REUSEADDR (every picker here, `free_ports` included) fails on
it, while a server that sets SO_REUSEADDR before it binds (redis-server, gunicorn,
toxiproxy-server, harness.toxiproxy) binds and listens regardless: the hold keeps
pickers off the port from the pick, through the server's start, and while the server
is down (a kill fault) until it is back. It cannot stop a process that binds that
port explicitly with SO_REUSEADDR: `bindable` tells whether a server could bind now.
"""

from __future__ import annotations

import random
import socket
import time
from contextlib import ExitStack
from pathlib import Path

LOWEST = 10000  # below: well-known and registered services a machine may run
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL_START = 32768


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_EPHEMERAL_START


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now, below the ephemeral range."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct TCP ports that nothing listens on right now.

    Every probe socket stays bound until all the ports are picked, so one call never
    hands out a port twice (two services of one stack on one port fail to start).
    """
    holds = hold_ports(count, host)
    for hold in holds:
        hold.close()
    return [hold.port for hold in holds]


class PortHold:
    """A port this process keeps from other pickers (module docstring): a bound socket
    that never listens. `close()` gives the port back."""

    def __init__(self, sock: socket.socket) -> None:
        self._socket: socket.socket | None = sock
        self.host, self.port = sock.getsockname()[:2]

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    @property
    def held(self) -> bool:
        return self._socket is not None

    def __repr__(self) -> str:
        return f"PortHold({self.host}:{self.port}{'' if self.held else ', released'})"


def hold_ports(count: int, host: str = "127.0.0.1") -> list[PortHold]:
    """`count` distinct free TCP ports, each held until its `close()` (module docstring)."""
    rng = random.Random()
    top = ephemeral_start()
    with ExitStack() as sockets:
        found: dict[int, socket.socket] = {}
        for _ in range(50 * count):
            if len(found) == count or top - LOWEST < count:
                break
            port = rng.randrange(LOWEST, top)
            if port in found:
                continue
            probe = sockets.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                probe.bind((host, port))  # exclusive: fails on anyone's socket, another hold included
            except OSError:
                continue
            found[port] = probe
        while len(found) < count:  # the range below is full: let the OS pick
            probe = sockets.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            probe.bind((host, 0))
            found[int(probe.getsockname()[1])] = probe
        for probe in found.values():
            # After the bind: the hold lets a SO_REUSEADDR server in, and no picker.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sockets.pop_all()  # every probe is a hold now: kept open
        return [PortHold(probe) for probe in found.values()]


def bindable(port: int, host: str = "127.0.0.1") -> bool:
    """Could a server that sets SO_REUSEADDR (as every one the stack starts does)
    bind host:port now? False while another socket listens there (or is bound without
    SO_REUSEADDR); this process's own `PortHold` and closing connections do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def wait_for_port(host: str, port: int, *, timeout: float = 10.0) -> bool:
    """True once something accepts TCP connections on host:port, False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False
