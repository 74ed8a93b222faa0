"""Free loopback ports for servers the harness and the tests start.

A port is picked now and bound later, by another process (a proxy, Redis, a node).
Between the two, a port of the kernel's ephemeral range (`ip_local_port_range`,
32768-60999 on Linux by default) may become the local end of any outgoing connection
on the machine, and the server then fails with "address already in use": on a busy
machine running tests in parallel this is a real, repeated failure. So the ports are
drawn at random below that range (from `LOWEST` up), each checked by binding it; only
when that range is exhausted does the OS pick (port 0, inside the ephemeral range).
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
    rng = random.Random()
    top = ephemeral_start()
    with ExitStack() as sockets:
        found: list[int] = []
        for _ in range(50 * count):
            if len(found) == count or top - LOWEST < count:
                break
            port = rng.randrange(LOWEST, top)
            if port in found:
                continue
            probe = sockets.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                probe.bind((host, port))
            except OSError:
                continue
            found.append(port)
        while len(found) < count:  # the range below is full: let the OS pick
            probe = sockets.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            probe.bind((host, 0))
            found.append(int(probe.getsockname()[1]))
        return found


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
