"""Fixtures for the embedded Toxiproxy tests: an echo upstream, and a helper that
creates a proxy in front of it on the server of `embedded_toxiproxy`
(tests/support/toxiproxy.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import requests
from tp_helpers import EchoServer

from harness.toxiproxy.server import EmbeddedToxiproxy


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer().start()
    yield server
    server.stop()


@pytest.fixture
def make_proxy(embedded_toxiproxy: EmbeddedToxiproxy, echo: EchoServer) -> Callable[..., int]:
    """Create a proxy to the echo server; returns the port it listens on."""

    def create(name: str = "echo", **extra: object) -> int:
        body = {"name": name, "listen": "127.0.0.1:0", "upstream": echo.address, **extra}
        response = requests.post(f"{embedded_toxiproxy.url}/proxies", json=body, timeout=5)
        assert response.status_code == 201, response.text
        return int(response.json()["listen"].rsplit(":", 1)[1])

    return create
