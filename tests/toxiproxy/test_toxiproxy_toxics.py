"""Toxic behaviour over real TCP, through the embedded server to an echo server.

Timings are lower bounds with margins (a toxic adds at least its delay); nothing
here asserts that something is fast."""

from __future__ import annotations

import socket
import time

import pytest
import requests
from tp_helpers import EchoServer, connect, recv_exactly, recv_until_eof

from harness.toxiproxy.server import EmbeddedToxiproxy


def add_toxic(server: EmbeddedToxiproxy, proxy: str, body: dict) -> dict:
    response = requests.post(f"{server.url}/proxies/{proxy}/toxics", json=body, timeout=5)
    assert response.status_code == 200, response.text
    return response.json()


def round_trip(sock: socket.socket, payload: bytes = b"ping") -> tuple[bytes, float]:
    started = time.monotonic()
    sock.sendall(payload)
    echoed = recv_exactly(sock, len(payload))
    return echoed, time.monotonic() - started


def test_plain_proxy_echoes_bytes_exactly(make_proxy) -> None:
    port = make_proxy()
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
    with connect(port) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        assert recv_until_eof(sock) == payload


def test_latency_applies_to_an_open_connection_and_adds_at_least_its_value(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    with connect(port) as sock:
        assert round_trip(sock)[0] == b"ping"
        add_toxic(embedded_toxiproxy, "echo", {"type": "latency", "attributes": {"latency": 300}})
        echoed, elapsed = round_trip(sock)
        assert echoed == b"ping"
        assert elapsed >= 0.29


def test_latency_on_both_streams_adds_up(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "latency", "stream": "upstream", "attributes": {"latency": 150}})
    add_toxic(embedded_toxiproxy, "echo", {"type": "latency", "stream": "downstream", "attributes": {"latency": 150}})
    with connect(port) as sock:
        echoed, elapsed = round_trip(sock)
    assert echoed == b"ping" and elapsed >= 0.29


def test_jitter_varies_the_delay(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "latency", "attributes": {"latency": 100, "jitter": 80}})
    with connect(port) as sock:
        samples = [round_trip(sock)[1] for _ in range(8)]
    assert min(samples) >= 0.019
    assert max(samples) - min(samples) > 0.01


def test_timeout_closes_after_its_time_and_drops_data(embedded_toxiproxy, make_proxy, echo: EchoServer) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "timeout", "attributes": {"timeout": 300}})
    with connect(port) as sock:
        started = time.monotonic()
        sock.sendall(b"lost")
        assert recv_until_eof(sock) == b""  # nothing came back, then EOF
        assert time.monotonic() - started >= 0.29
    assert bytes(echo.received[0]) == b"lost"  # upstream was untouched


def test_timeout_zero_holds_and_drops_until_removed(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "timeout", "stream": "upstream", "attributes": {"timeout": 0}})
    with connect(port, timeout=0.6) as sock:
        sock.sendall(b"dropped")
        with pytest.raises(TimeoutError):
            sock.recv(10)  # held open, nothing delivered
        # Toxiproxy closes the connections a timeout toxic held when it is removed.
        deleted = requests.delete(f"{embedded_toxiproxy.url}/proxies/echo/toxics/timeout_upstream", timeout=5)
        assert deleted.status_code == 204
        sock.settimeout(5)
        try:
            assert sock.recv(10) == b""
        except ConnectionResetError:
            pass
    with connect(port) as sock:
        assert round_trip(sock, b"after")[0] == b"after"


def test_timeout_restarts_its_timer_on_data(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "timeout", "stream": "upstream", "attributes": {"timeout": 300}})
    with connect(port) as sock:
        started = time.monotonic()
        for _ in range(4):  # keep the upstream busy for 0.6 s
            time.sleep(0.15)
            sock.sendall(b"x")
        assert recv_until_eof(sock) == b""
        assert time.monotonic() - started >= 0.85


def test_reset_peer_gives_connection_reset_after_data(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "reset_peer", "attributes": {"timeout": 200}})
    with connect(port) as sock:
        started = time.monotonic()
        sock.sendall(b"ping")  # the echo reaching the toxic starts its timer
        with pytest.raises(ConnectionResetError):
            for _ in range(50):
                if not sock.recv(10):
                    break
        assert time.monotonic() - started >= 0.19


def test_reset_peer_zero_on_upstream_resets_at_once(embedded_toxiproxy, make_proxy, echo: EchoServer) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "reset_peer", "stream": "upstream", "attributes": {"timeout": 0}})
    with connect(port) as sock:
        sock.sendall(b"never arrives")
        with pytest.raises(ConnectionResetError):
            for _ in range(50):
                if not sock.recv(10):
                    break
    assert all(bytes(received) == b"" for received in echo.received)


def test_limit_data_passes_exactly_n_bytes_then_eof(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "limit_data", "attributes": {"bytes": 10}})
    with connect(port) as sock:
        sock.sendall(b"0123456789abcdefghij" * 5)
        assert recv_until_eof(sock) == b"0123456789"


def test_limit_data_counts_across_chunks(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "limit_data", "attributes": {"bytes": 7}})
    with connect(port) as sock:
        assert round_trip(sock, b"abcd")[0] == b"abcd"
        sock.sendall(b"efghij")
        assert recv_until_eof(sock) == b"efg"


def test_slow_close_delays_the_close(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "slow_close", "attributes": {"delay": 400}})
    with connect(port) as sock:
        sock.sendall(b"bye")
        started = time.monotonic()
        sock.shutdown(socket.SHUT_WR)  # the echo server closes in turn
        assert recv_until_eof(sock) == b"bye"
        assert time.monotonic() - started >= 0.39


def test_bandwidth_limits_the_rate(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "bandwidth", "attributes": {"rate": 100}})  # 100 KB/s
    payload = b"x" * 50_000
    with connect(port) as sock:
        started = time.monotonic()
        sock.sendall(payload)
        assert recv_exactly(sock, len(payload)) == payload
        assert time.monotonic() - started >= 0.4  # 50 KB at 100 KB/s is 0.5 s


def test_slicer_splits_writes(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(
        embedded_toxiproxy,
        "echo",
        {"type": "slicer", "attributes": {"average_size": 10, "size_variation": 0, "delay": 20_000}},
    )
    payload = bytes(range(100))
    with connect(port) as sock:
        started = time.monotonic()
        sock.sendall(payload)
        pieces = []
        while sum(map(len, pieces)) < len(payload):
            piece = sock.recv(1000)
            assert piece
            pieces.append(piece)
        assert b"".join(pieces) == payload
        assert len(pieces) >= 5
        assert time.monotonic() - started >= 0.17  # nine 20 ms gaps


def test_toxicity_zero_never_and_one_always(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    toxic = {"name": "cap", "type": "limit_data", "attributes": {"bytes": 1}, "toxicity": 0.0}
    add_toxic(embedded_toxiproxy, "echo", toxic)
    for _ in range(15):
        with connect(port) as sock:
            assert round_trip(sock, b"whole")[0] == b"whole"
    requests.post(f"{embedded_toxiproxy.url}/proxies/echo/toxics/cap", json={"toxicity": 1.0}, timeout=5)
    for _ in range(15):
        with connect(port) as sock:
            sock.sendall(b"whole")
            assert recv_until_eof(sock) == b"w"


def test_toxicity_is_drawn_per_connection(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "limit_data", "attributes": {"bytes": 1}, "toxicity": 0.5})
    outcomes = []
    for _ in range(40):
        with connect(port) as sock:
            sock.sendall(b"ab")
            sock.shutdown(socket.SHUT_WR)
            outcomes.append(recv_until_eof(sock))
    assert set(outcomes) == {b"a", b"ab"}  # both happen; the odds of not are 2 ** -39


def test_upstream_toxic_only_hits_upstream(embedded_toxiproxy, make_proxy, echo: EchoServer) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "limit_data", "stream": "upstream", "attributes": {"bytes": 5}})
    with connect(port) as sock:
        sock.sendall(b"0123456789")
        assert recv_until_eof(sock) == b"01234"
    assert bytes(echo.received[0]) == b"01234"


def test_downstream_toxic_only_hits_downstream(embedded_toxiproxy, make_proxy, echo: EchoServer) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"type": "limit_data", "stream": "downstream", "attributes": {"bytes": 5}})
    with connect(port) as sock:
        sock.sendall(b"0123456789")
        assert recv_until_eof(sock) == b"01234"
    deadline = time.monotonic() + 5
    while len(echo.received[0]) < 10 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bytes(echo.received[0]) == b"0123456789"


def test_removing_a_toxic_restores_open_connections(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"name": "lag", "type": "latency", "attributes": {"latency": 200}})
    with connect(port) as sock:
        assert round_trip(sock)[1] >= 0.19
        requests.delete(f"{embedded_toxiproxy.url}/proxies/echo/toxics/lag", timeout=5)
        for index in range(20):  # byte order is kept across the switch back to the fast path
            payload = f"msg-{index}".encode()
            assert round_trip(sock, payload)[0] == payload


def test_disabling_refuses_new_and_cuts_open_connections(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    with connect(port) as sock:
        assert round_trip(sock)[0] == b"ping"
        requests.post(f"{embedded_toxiproxy.url}/proxies/echo", json={"enabled": False}, timeout=5)
        try:
            assert sock.recv(10) == b""
        except ConnectionResetError:
            pass  # a reset is as good as a close here
    with pytest.raises(ConnectionRefusedError):
        connect(port, timeout=2)


def test_upstream_down_closes_client(embedded_toxiproxy) -> None:
    dead = socket.create_server(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()
    body = {"name": "dead", "listen": "127.0.0.1:0", "upstream": f"127.0.0.1:{dead_port}"}
    listen = requests.post(f"{embedded_toxiproxy.url}/proxies", json=body, timeout=5).json()["listen"]
    with connect(int(listen.rsplit(":", 1)[1])) as sock:
        try:
            assert sock.recv(10) == b""
        except ConnectionResetError:
            pass


def test_removing_a_toxic_mid_flight_keeps_byte_order(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"name": "lag", "type": "latency", "attributes": {"latency": 300}})
    with connect(port) as sock:
        sock.sendall(b"first-")
        time.sleep(0.05)  # "first-" is now held by the latency toxic
        assert requests.delete(f"{embedded_toxiproxy.url}/proxies/echo/toxics/lag", timeout=5).status_code == 204
        sock.sendall(b"second")
        assert recv_exactly(sock, 12) == b"first-second"


def test_removing_a_huge_latency_lets_held_data_go(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"name": "lag", "type": "latency", "attributes": {"latency": 600_000}})
    with connect(port, timeout=5) as sock:
        sock.sendall(b"held")
        time.sleep(0.05)
        assert requests.delete(f"{embedded_toxiproxy.url}/proxies/echo/toxics/lag", timeout=5).status_code == 204
        assert recv_exactly(sock, 4) == b"held"


def test_removing_slow_close_while_closing_lets_the_close_through(embedded_toxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_toxic(embedded_toxiproxy, "echo", {"name": "slow", "type": "slow_close", "attributes": {"delay": 600_000}})
    with connect(port, timeout=5) as sock:
        sock.sendall(b"bye")
        assert recv_exactly(sock, 3) == b"bye"
        sock.shutdown(socket.SHUT_WR)
        time.sleep(0.05)
        assert requests.delete(f"{embedded_toxiproxy.url}/proxies/echo/toxics/slow", timeout=5).status_code == 204
        assert recv_until_eof(sock) == b""
