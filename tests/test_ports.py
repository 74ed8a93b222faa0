"""harness.ports: free loopback ports for the servers a stack and the tests start."""

from __future__ import annotations

import itertools
import socket
from contextlib import ExitStack

import pytest

from harness.ports import ephemeral_start, free_port, free_ports, wait_for_port


def test_free_ports_are_distinct_and_each_can_be_listened_on() -> None:
    ports = free_ports(40)
    assert len(set(ports)) == 40
    with ExitStack() as listeners:
        for port in ports:
            server = listeners.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            server.bind(("127.0.0.1", port))  # raises if the port were taken
            server.listen()
        assert all(wait_for_port("127.0.0.1", port, timeout=2.0) for port in ports[:3])


def test_a_free_port_has_no_listener_until_one_binds_it() -> None:
    port = free_port()
    assert not wait_for_port("127.0.0.1", port, timeout=0.2)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", port))
        server.listen()
        assert wait_for_port("127.0.0.1", port, timeout=2.0)


def test_ports_are_drawn_below_the_ephemeral_range() -> None:
    """A port of the ephemeral range may meanwhile become the local end of an outgoing
    connection, and the server that binds it later fails: none is handed out there."""
    top = ephemeral_start()
    assert 1024 < top <= 65535
    ports = free_ports(30)
    assert all(10000 <= port < top for port in ports), ports


def test_a_taken_port_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", free_port()))
        port = taken.getsockname()[1]
        # A generator that offers the taken port first: it is refused, the next one taken.
        offers = itertools.chain([port, port], itertools.count(10000))
        monkeypatch.setattr("harness.ports.random.Random.randrange", lambda self, a, b: next(offers))
        [picked] = free_ports(1)
        assert picked != port
