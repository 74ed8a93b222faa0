"""Fixtures of the stack tests: a shared stack for tests that only add faults, and
helpers to prove that nothing (process or listening port) outlives a stack."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import requests

from harness.process_handle import pid_alive
from harness.stack import services as svc
from harness.stack.info import StackInfo
from harness.stack.local import start_stack
from harness.stack.protocol import Stack
from tests.support.registry import registry_for_session
from tests.support.stacks import small_settings

ORDER = {"sku": "sku-1", "quantity": 1, "amount_cents": 1000, "currency": "EUR"}


def stack_ports(state: StackInfo | Mapping[str, Any]) -> list[int]:
    """Every port a stack listens on (its services' and its proxies'), from its info or state dict."""
    info = state if isinstance(state, StackInfo) else StackInfo.from_json(state)
    ports = [service.port for service in info.services if service.port]
    for url in (info.app_url, info.app_direct_url, info.redis_proxy_url):
        ports.append(int(url.rsplit(":", 1)[1].split("/")[0]))
    return ports


def wait_until_gone(root: Path, ports: list[int], timeout: float = 15.0,
                    pids: tuple[int, ...] = ()) -> tuple[list[int], list[int]]:
    """(processes, ports) of the stack still alive after waiting at most `timeout`; `pids`
    are waited for too (a supervisor, which carries no mark, ends after what it started)."""
    deadline = time.monotonic() + timeout
    while True:
        processes = svc.marked_processes(str(root)) + [pid for pid in pids if pid_alive(pid)]
        listening = [port for port in ports if svc.port_listening(port)]
        if (not processes and not listening) or time.monotonic() > deadline:
            return processes, listening
        time.sleep(0.1)


def create_order(base_url: str, key: str | None = None, timeout: float = 5.0) -> requests.Response:
    return requests.post(f"{base_url}/api/v1/orders", json=ORDER, timeout=timeout,
                         headers={"Idempotency-Key": key or f"k-{uuid.uuid4().hex}"})


# A registry of the tests' own: `down --all` here must never reach a stack that
# another test session (or a person) started from this checkout.
private_registry = pytest.fixture(registry_for_session, scope="session", autouse=True, name="private_registry")


@pytest.fixture(scope="module")
def shared_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One stack for a module whose tests only add (and remove) faults."""
    root = tmp_path_factory.mktemp("stack") / ".harness"
    stack = start_stack(small_settings(root, env={"TARGET_APP_IDEMPOTENCY_TTL": "3600"}))
    ports = stack_ports(stack.info)
    try:
        yield stack
    finally:
        stack.down()
        processes, listening = wait_until_gone(root, ports)
        assert processes == [] and listening == [], f"leaked after down: {processes} {listening}"
