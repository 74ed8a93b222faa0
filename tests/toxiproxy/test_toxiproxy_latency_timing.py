"""Latency toxics, timed: what each one adds, alone and stacked.

Toxiproxy advances a chunk's timestamp as a latency toxic lets it go, so the next
latency toxic in the chain counts from there and stacked toxics add up (two
downstream toxics of 100 ms: about 200 ms per round trip on the real 2.12.0).
Every figure here is the median of several round trips minus the median of the
same round trips without toxics, asserted with a tolerance: 100 ms +- 15 ms for
one toxic, 200 ms +- 30 ms for two. The machine is shared, hence the medians.
"""

from __future__ import annotations

import itertools
import socket
import statistics
import threading
import time
from collections.abc import Callable

import requests
from tp_helpers import connect, recv_exactly

from harness.toxiproxy.server import EmbeddedToxiproxy

ROUNDS = 7


def add_latency(server: EmbeddedToxiproxy, name: str, stream: str, latency: int, proxy: str = "echo") -> None:
    body = {"name": name, "type": "latency", "stream": stream, "attributes": {"latency": latency}}
    response = requests.post(f"{server.url}/proxies/{proxy}/toxics", json=body, timeout=5)
    assert response.status_code == 200, response.text


def median_round_trip(sock: socket.socket, rounds: int = ROUNDS) -> float:
    """Seconds for a small message to go to the echo server and back (median)."""
    times = []
    for number in range(rounds):
        payload = f"round-{number:03d}".encode()
        started = time.perf_counter()
        sock.sendall(payload)
        assert recv_exactly(sock, len(payload)) == payload
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def added_latency(server: EmbeddedToxiproxy, port: int, add_toxics: Callable[[], None]) -> float:
    """Median round trip with the toxics minus the median without, on one connection
    (toxics apply to open connections at once)."""
    with connect(port) as sock:
        baseline = median_round_trip(sock)
        add_toxics()
        return median_round_trip(sock) - baseline


def test_one_downstream_latency_adds_its_value(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    port = make_proxy()
    added = added_latency(embedded_toxiproxy, port, lambda: add_latency(embedded_toxiproxy, "lag", "downstream", 100))
    assert abs(added - 0.100) <= 0.015, f"added {added * 1000:.1f} ms"


def test_one_upstream_latency_adds_its_value(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    port = make_proxy()
    added = added_latency(embedded_toxiproxy, port, lambda: add_latency(embedded_toxiproxy, "lag", "upstream", 100))
    assert abs(added - 0.100) <= 0.015, f"added {added * 1000:.1f} ms"


def test_two_downstream_latencies_add_up(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    port = make_proxy()

    def two() -> None:
        add_latency(embedded_toxiproxy, "first", "downstream", 100)
        add_latency(embedded_toxiproxy, "second", "downstream", 100)

    added = added_latency(embedded_toxiproxy, port, two)
    assert abs(added - 0.200) <= 0.030, f"added {added * 1000:.1f} ms"


def test_two_upstream_latencies_add_up(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    port = make_proxy()

    def two() -> None:
        add_latency(embedded_toxiproxy, "first", "upstream", 100)
        add_latency(embedded_toxiproxy, "second", "upstream", 100)

    added = added_latency(embedded_toxiproxy, port, two)
    assert abs(added - 0.200) <= 0.030, f"added {added * 1000:.1f} ms"


def test_upstream_and_downstream_latencies_add_up(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    port = make_proxy()

    def both() -> None:
        add_latency(embedded_toxiproxy, "up", "upstream", 100)
        add_latency(embedded_toxiproxy, "down", "downstream", 100)

    added = added_latency(embedded_toxiproxy, port, both)
    assert abs(added - 0.200) <= 0.030, f"added {added * 1000:.1f} ms"


def test_stacked_latency_with_a_noop_between_still_adds_up(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    port = make_proxy()

    def chain() -> None:
        add_latency(embedded_toxiproxy, "first", "downstream", 100)
        response = requests.post(f"{embedded_toxiproxy.url}/proxies/echo/toxics", json={"type": "noop"}, timeout=5)
        assert response.status_code == 200
        add_latency(embedded_toxiproxy, "second", "downstream", 100)

    added = added_latency(embedded_toxiproxy, port, chain)
    assert abs(added - 0.200) <= 0.030, f"added {added * 1000:.1f} ms"


def test_removing_one_of_two_latencies_leaves_the_other(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    port = make_proxy()
    add_latency(embedded_toxiproxy, "first", "downstream", 100)
    add_latency(embedded_toxiproxy, "second", "downstream", 100)
    with connect(port) as sock:
        median_round_trip(sock, rounds=1)  # the connection is up and the toxics act on it
        assert requests.delete(f"{embedded_toxiproxy.url}/proxies/echo/toxics/first", timeout=5).status_code == 204
        remaining = median_round_trip(sock)
    assert abs(remaining - 0.100) <= 0.015, f"round trip {remaining * 1000:.1f} ms"


def test_stacked_latency_on_a_stream_behaves_like_toxiproxys_pipeline(
    embedded_toxiproxy: EmbeddedToxiproxy, make_proxy
) -> None:
    """Chunks 20 ms apart, echoed through two downstream toxics of 100 ms. Toxiproxy
    runs each toxic as its own goroutine and the first one moves a queued chunk's
    timestamp on only by what it slept (the gap to the chunk before), so the second
    one lets the stream through early: side by side, a real 2.12.0 built from source
    gave delays of 201, 181, 161, 141, 121, 120, 121, ... ms. The first chunk takes
    the full 200 ms; once the stream flows, each takes 100 ms plus the gap."""
    port = make_proxy()
    add_latency(embedded_toxiproxy, "first", "downstream", 100)
    add_latency(embedded_toxiproxy, "second", "downstream", 100)
    count, size = 15, 16
    sent_at: list[float] = []
    arrived_at: list[float] = []
    with connect(port) as sock:

        def read() -> None:
            for _ in range(count):
                if len(recv_exactly(sock, size)) != size:
                    return
                arrived_at.append(time.perf_counter())

        reader = threading.Thread(target=read)
        reader.start()
        for number in range(count):
            sent_at.append(time.perf_counter())
            sock.sendall(f"chunk-{number:010d}".encode())
            time.sleep(0.020)
        reader.join(timeout=10)
    assert len(arrived_at) == count
    delays = [arrived - sent for sent, arrived in zip(sent_at, arrived_at, strict=True)]
    shown = [round(delay * 1000) for delay in delays]
    gap = statistics.median(later - earlier for earlier, later in itertools.pairwise(sent_at))
    assert abs(delays[0] - 0.200) <= 0.030, shown
    assert abs(statistics.median(delays[7:]) - (0.100 + gap)) <= 0.015, (shown, gap)
    assert delays[1] > delays[3] > delays[7], shown  # the queue drains chunk by chunk
