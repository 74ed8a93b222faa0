"""harness.ports: free loopback ports for the servers a stack and the tests start."""

from __future__ import annotations

import socket
from contextlib import ExitStack

from harness.ports import free_port, free_ports, wait_for_port


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
