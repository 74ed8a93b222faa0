"""toxiproxy-python 0.1.1 drives the embedded server without workarounds."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists
from tp_helpers import EchoServer, connect, recv_until_eof

from harness.toxiproxy.server import EmbeddedToxiproxy


@pytest.fixture
def client(embedded_toxiproxy: EmbeddedToxiproxy) -> Iterator[Toxiproxy]:
    saved = (APIConsumer.host, APIConsumer.port)
    client = Toxiproxy()
    client.update_api_consumer(embedded_toxiproxy.host, embedded_toxiproxy.port)
    yield client
    APIConsumer.host, APIConsumer.port = saved


def test_running_and_version(client: Toxiproxy) -> None:
    assert client.running() is True
    assert b"2.12.0" in client.version()


def test_create_list_get_destroy(client: Toxiproxy, echo: EchoServer) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    assert proxy.name == "echo" and proxy.enabled is True
    assert proxy.listen.startswith("127.0.0.1:") and not proxy.listen.endswith(":0")
    assert set(client.proxies()) == {"echo"}
    assert client.get_proxy("echo").upstream == echo.address
    with pytest.raises(ProxyExists):
        client.create(upstream=echo.address, name="echo")
    assert client.destroy(proxy) is True
    assert client.proxies() == {}
    with pytest.raises(NotFound):
        proxy.destroy()


def test_toxics_add_list_destroy(client: Toxiproxy, echo: EchoServer) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    proxy.add_toxic(type="limit_data", attributes={"bytes": 3})
    proxy.add_toxic(type="latency", stream="upstream", toxicity=0.0, attributes={"latency": 10})
    toxics = proxy.toxics()
    assert set(toxics) == {"limit_data_downstream", "latency_upstream"}
    assert toxics["limit_data_downstream"].attributes == {"bytes": 3}
    assert toxics["latency_upstream"].toxicity == 0.0
    port = int(proxy.listen.rsplit(":", 1)[1])
    with connect(port) as sock:
        sock.sendall(b"abcdef")
        assert recv_until_eof(sock) == b"abc"
    with pytest.raises(ProxyExists):
        proxy.add_toxic(type="limit_data")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="nonsense")
    assert proxy.destroy_toxic("limit_data_downstream") is True
    assert proxy.get_toxic("limit_data_downstream") is None
    with pytest.raises(NotFound):
        proxy.destroy_toxic("limit_data_downstream")


def test_down_context_and_reset(client: Toxiproxy, echo: EchoServer) -> None:
    proxy = client.create(upstream=echo.address, name="echo")
    port = int(proxy.listen.rsplit(":", 1)[1])
    with proxy.down():
        assert client.get_proxy("echo").enabled is False
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert client.get_proxy("echo").enabled is True
    proxy.add_toxic(type="noop")
    proxy.disable()
    assert client.reset() is True
    assert client.get_proxy("echo").enabled is True
    assert proxy.toxics() == {}


def test_populate_and_destroy_all(client: Toxiproxy, echo: EchoServer) -> None:
    created = client.populate(
        [
            {"name": "one", "upstream": echo.address, "listen": "127.0.0.1:0"},
            {"name": "two", "upstream": echo.address, "listen": "127.0.0.1:0"},
        ]
    )
    assert sorted(proxy.name for proxy in created) == ["one", "two"]
    client.destroy_all()
    assert client.proxies() == {}
