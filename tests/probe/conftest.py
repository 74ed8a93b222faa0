"""Services for the probe's end-to-end tests: the aiohttp example (naive or fixed)
and the target app under gunicorn, each on a free loopback port, stopped after."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.ports import free_port

from probe_helpers import Service, start_service


@pytest.fixture
def example_service(tmp_path: Path) -> Iterator[Callable[[str], Service]]:
    """`example_service("naive" | "fixed")` → the aiohttp payments example, running."""
    started: list[Service] = []

    def start(mode: str) -> Service:
        port = free_port()
        service = start_service([sys.executable, "examples/payments_service.py", "--mode", mode, "--port", str(port)],
                         dict(os.environ), port, tmp_path / f"example-{mode}.log")
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()


@pytest.fixture
def target_app(redis_url: str, tmp_path: Path) -> Iterator[Callable[[str], Service]]:
    """`target_app(unsafe_disable)` → the target app under gunicorn on the test's Redis db."""
    started: list[Service] = []

    def start(unsafe_disable: str = "") -> Service:
        port = free_port()
        env = {**os.environ, "TARGET_APP_REDIS_URL": redis_url, "TARGET_APP_UNSAFE_DISABLE": unsafe_disable,
               "TARGET_APP_INVENTORY": "sku-1=10000000"}
        service = start_service([sys.executable, "-m", "gunicorn", "--workers", "2", "--bind", f"127.0.0.1:{port}",
                          "--log-level", "warning", "target_app.wsgi:app"], env, port,
                         tmp_path / f"gunicorn-{unsafe_disable or 'correct'}.log")
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()
