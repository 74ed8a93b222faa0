"""`GET /metrics` as `toxiproxy-server -proxy-metrics -runtime-metrics` serves it:
Prometheus text, Toxiproxy's counter names and labels, only when a flag is on."""

from __future__ import annotations

import gzip
import http.client
import re
import time
from collections.abc import Iterator

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from tp_helpers import EchoServer, connect, recv_exactly

from harness.toxiproxy.server import EmbeddedToxiproxy, ServerOptions

RECEIVED = "toxiproxy_proxy_received_bytes_total"
SENT = "toxiproxy_proxy_sent_bytes_total"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"


def start(**options: bool) -> EmbeddedToxiproxy:
    return EmbeddedToxiproxy(options=ServerOptions(**options)).start()


@pytest.fixture
def proxy_metrics_server() -> Iterator[EmbeddedToxiproxy]:
    server = start(proxy_metrics=True)
    yield server
    server.stop()


def samples(server: EmbeddedToxiproxy) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = requests.get(f"{server.url}/metrics", timeout=5)
    assert response.status_code == 200
    found = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def labels(direction: str, listener: str, proxy: str, upstream: str) -> tuple[tuple[str, str], ...]:
    return (("direction", direction), ("listener", listener), ("proxy", proxy), ("upstream", upstream))


def make_echo_proxy(server: EmbeddedToxiproxy, echo: EchoServer, name: str = "echo") -> str:
    body = {"name": name, "listen": "127.0.0.1:0", "upstream": echo.address}
    response = requests.post(f"{server.url}/proxies", json=body, timeout=5)
    assert response.status_code == 201
    return response.json()["listen"]


def echo_through(listen: str, payload: bytes) -> None:
    with connect(int(listen.rsplit(":", 1)[1])) as sock:
        sock.sendall(payload)
        assert recv_exactly(sock, len(payload)) == payload


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_metrics_exist_only_when_a_flag_is_on(embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    assert requests.get(f"{embedded_toxiproxy.url}/metrics", timeout=5).status_code == 404


def test_bytes_per_proxy_and_direction_after_the_connection_closes(
    proxy_metrics_server: EmbeddedToxiproxy, echo: EchoServer
) -> None:
    server = proxy_metrics_server
    listen = make_echo_proxy(server, echo)
    echo_through(listen, b"x" * 1000)
    expected = {
        (name, labels(direction, listen, "echo", echo.address)): 1000.0
        for name in (RECEIVED, SENT)
        for direction in ("upstream", "downstream")
    }
    wait_for(lambda: all(samples(server).get(key) == value for key, value in expected.items()))
    response = requests.get(f"{server.url}/metrics", timeout=5)
    assert response.headers["content-type"] == CONTENT_TYPE
    # Labels in Toxiproxy's (sorted) order, one series per direction.
    assert (
        f'{RECEIVED}{{direction="upstream",listener="{listen}",proxy="echo",upstream="{echo.address}"}} 1000'
        in response.text
    )


def test_bytes_through_toxics_are_counted_too(proxy_metrics_server: EmbeddedToxiproxy, echo: EchoServer) -> None:
    server = proxy_metrics_server
    listen = make_echo_proxy(server, echo)
    echo_through(listen, b"a" * 300)  # the fast path
    toxic = {"type": "latency", "stream": "upstream", "attributes": {"latency": 1}}
    assert requests.post(f"{server.url}/proxies/echo/toxics", json=toxic, timeout=5).status_code == 200
    echo_through(listen, b"b" * 200)  # through the toxic chain
    key = (SENT, labels("upstream", listen, "echo", echo.address))
    wait_for(lambda: samples(server).get(key) == 500.0)
    assert samples(server)[(RECEIVED, labels("downstream", listen, "echo", echo.address))] == 500.0


def test_proxies_are_counted_apart(proxy_metrics_server: EmbeddedToxiproxy, echo: EchoServer) -> None:
    server = proxy_metrics_server
    first = make_echo_proxy(server, echo, "first")
    second = make_echo_proxy(server, echo, "second")
    echo_through(first, b"1" * 10)
    echo_through(second, b"2" * 20)
    wait_for(
        lambda: samples(server).get((RECEIVED, labels("upstream", first, "first", echo.address))) == 10.0
        and samples(server).get((RECEIVED, labels("upstream", second, "second", echo.address))) == 20.0
    )


def test_open_connections_are_included(proxy_metrics_server: EmbeddedToxiproxy, echo: EchoServer) -> None:
    # Toxiproxy adds a connection's bytes when it ends; here a scrape also sees open
    # ones, so the figures agree with it as soon as connections close.
    server = proxy_metrics_server
    listen = make_echo_proxy(server, echo)
    with connect(int(listen.rsplit(":", 1)[1])) as sock:
        sock.sendall(b"open")
        assert recv_exactly(sock, 4) == b"open"
        assert samples(server)[(SENT, labels("downstream", listen, "echo", echo.address))] == 4.0


def test_no_series_before_any_connection(proxy_metrics_server: EmbeddedToxiproxy, echo: EchoServer) -> None:
    make_echo_proxy(proxy_metrics_server, echo)
    text = requests.get(f"{proxy_metrics_server.url}/metrics", timeout=5).text
    assert "toxiproxy_proxy" not in text and "process_cpu_seconds_total" not in text


def test_runtime_metrics_alone() -> None:
    server = start(runtime_metrics=True)
    try:
        text = requests.get(f"{server.url}/metrics", timeout=5).text
        names = {family.name for family in text_string_to_metric_families(text)}
        assert {"process_cpu_seconds", "process_resident_memory_bytes", "python_info"} <= names
        assert not any(name.startswith("toxiproxy_") for name in names)
        # The two series Toxiproxy's end-to-end script greps for, under Go's names.
        assert re.search(r"^go_info\{version=\"[^\"]+\"\} 1", text, re.M), text
        assert re.search(r"^go_goroutines [1-9]", text, re.M), text
    finally:
        server.stop()


def test_metrics_take_any_method_and_gzip_when_asked() -> None:
    server = start(proxy_metrics=True, runtime_metrics=True)
    try:
        assert requests.post(f"{server.url}/metrics", timeout=5).status_code == 200
        conn = http.client.HTTPConnection(server.host, server.port, timeout=5)
        try:
            conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
            response = conn.getresponse()
            body = response.read()
            assert response.getheader("Content-Encoding") == "gzip"
            assert b"process_cpu_seconds_total" in gzip.decompress(body)
            assert response.getheader("X-Toxiproxy-Request-Id")
        finally:
            conn.close()
    finally:
        server.stop()
