"""Services for the probe's end-to-end tests: the aiohttp example (naive or fixed)
and the target app under gunicorn, each on a free loopback port, stopped after."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from harness.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
# Short probes keep the suite fast; the plan's first windows fall inside them.
PROBE_SECONDS = 3


@dataclass
class Service:
    address: str  # host:port
    process: subprocess.Popen
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def _start(command: list[str], env: dict[str, str], port: int, log_path: Path) -> Service:
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    service = Service(f"127.0.0.1:{port}", process, log_path)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if requests.get(f"http://{service.address}/healthz", timeout=1).status_code == 200:
                return service
        except requests.RequestException:
            time.sleep(0.1)
    service.stop()
    raise RuntimeError(f"{command[1:3]} did not come up:\n{log_path.read_text(errors='replace')[-2000:]}")


@pytest.fixture
def example_service(tmp_path: Path) -> Iterator[Callable[[str], Service]]:
    """`example_service("naive" | "fixed")` → the aiohttp payments example, running."""
    started: list[Service] = []

    def start(mode: str) -> Service:
        port = free_port()
        service = _start([sys.executable, "examples/payments_service.py", "--mode", mode, "--port", str(port)],
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
        service = _start([sys.executable, "-m", "gunicorn", "--workers", "2", "--bind", f"127.0.0.1:{port}",
                          "--log-level", "warning", "target_app.wsgi:app"], env, port,
                         tmp_path / f"gunicorn-{unsafe_disable or 'correct'}.log")
        started.append(service)
        return service

    yield start
    for service in started:
        service.stop()
