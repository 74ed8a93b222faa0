"""Many connections while toxics come and go: every byte of every connection
arrives, in order, when no toxic is meant to change the bytes."""

from __future__ import annotations

import random
import threading
import time

import requests
from tp_helpers import connect, recv_exactly

from harness.toxiproxy.server import EmbeddedToxiproxy

CONNECTIONS = 200
MIN_ROUNDS = 5
MAX_ROUNDS = 400
CHURN_CYCLES = 40
CHUNK = 4096


def _client(port: int, seed: int, errors: list[str], barrier: threading.Barrier, churned: threading.Event) -> None:
    rng = random.Random(seed)
    try:
        with connect(port, timeout=20) as sock:
            barrier.wait(timeout=20)
            # Keep talking until the churn is over (bounded in rounds either way).
            for round_number in range(MAX_ROUNDS):
                if round_number >= MIN_ROUNDS and churned.is_set():
                    return
                payload = rng.randbytes(rng.randint(4, CHUNK))
                # Several writes in flight at once, so a toxic that comes or goes
                # mid-stream would show up as reordered or lost bytes.
                quarter = len(payload) // 4
                for start in range(0, len(payload), quarter):
                    sock.sendall(payload[start : start + quarter])
                    time.sleep(rng.random() * 0.003)
                echoed = recv_exactly(sock, len(payload), deadline=20)
                if echoed != payload:
                    errors.append(f"connection {seed} round {round_number}: {len(echoed)} of {len(payload)} bytes, mismatch")
                    return
    except Exception as exc:  # noqa: BLE001 - collected and asserted below
        errors.append(f"connection {seed}: {exc!r}")


def _churn(server: EmbeddedToxiproxy, churned: threading.Event, counter: list[int]) -> None:
    """Add and remove toxics that must not change any byte: a noop, a slicer and a
    small latency that fire (so data switches between the fast path and the toxic
    chain), a latency toxic at toxicity 0, and a destructive toxic on another proxy."""
    toxics = [
        ("echo", {"name": "n", "type": "noop"}),
        ("echo", {"name": "s", "type": "slicer", "stream": "upstream", "attributes": {"average_size": 512}}),
        ("echo", {"name": "z", "type": "latency", "attributes": {"latency": 5000}, "toxicity": 0.0}),
        ("echo", {"name": "l", "type": "latency", "attributes": {"latency": 3, "jitter": 2}}),
        ("other", {"name": "cut", "type": "limit_data", "attributes": {"bytes": 1}}),
    ]
    session = requests.Session()
    for _ in range(CHURN_CYCLES):
        proxy, toxic = random.choice(toxics)
        base = f"{server.url}/proxies/{proxy}/toxics"
        if session.post(base, json=toxic, timeout=5).status_code == 200:
            counter[0] += 1
        time.sleep(0.002)
        session.delete(f"{base}/{toxic['name']}", timeout=5)
    churned.set()


def test_churn_keeps_every_byte_of_200_connections(embedded_toxiproxy: EmbeddedToxiproxy, make_proxy) -> None:
    port = make_proxy("echo")
    make_proxy("other")
    errors: list[str] = []
    barrier = threading.Barrier(CONNECTIONS + 1)
    churned = threading.Event()
    clients = [
        threading.Thread(target=_client, args=(port, seed, errors, barrier, churned)) for seed in range(CONNECTIONS)
    ]
    for thread in clients:
        thread.start()
    barrier.wait(timeout=30)  # all 200 connections are open at once
    added = [0]
    churner = threading.Thread(target=_churn, args=(embedded_toxiproxy, churned, added))
    churner.start()
    churner.join(timeout=30)
    churned.set()  # clients stop even if the churner failed
    for thread in clients:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in clients)
    assert errors == []
    assert added[0] == CHURN_CYCLES
