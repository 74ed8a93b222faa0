"""Services for the probe's end-to-end tests: the aiohttp example (naive or fixed)
and the target app under gunicorn, each on a free loopback port, stopped after."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import pytest
from probe_helpers import ROOT

from tests.support.services import HttpService, target_app_gunicorn


@pytest.fixture
def example_service(http_services: Callable[..., HttpService]) -> Callable[..., HttpService]:
    """`example_service("naive" | "fixed", *flags)` → the aiohttp payments example, running;
    `flags` are more of its options, e.g. "--missing-key-status", "422"."""
    script = str(ROOT / "examples/payments_service.py")

    def start(mode: str, *flags: str) -> HttpService:
        return http_services("-".join(("example", mode, *(flag.strip("-") for flag in flags))),
                             lambda port: [sys.executable, script, "--mode", mode, "--port", str(port), *flags],
                             env=os.environ)

    return start


@pytest.fixture
def target_app(redis_url: str, http_services: Callable[..., HttpService]) -> Callable[[str], HttpService]:
    """`target_app(unsafe_disable)` → the target app under gunicorn on the test's Redis db."""

    def start(unsafe_disable: str = "") -> HttpService:
        env = {**os.environ, "TARGET_APP_REDIS_URL": redis_url, "TARGET_APP_UNSAFE_DISABLE": unsafe_disable,
               "TARGET_APP_INVENTORY": "sku-1=10000000"}
        return http_services(f"gunicorn-{unsafe_disable or 'correct'}",
                             lambda port: target_app_gunicorn(port, workers=2), env=env)

    return start
