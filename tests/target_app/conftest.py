"""Fixtures for the target app's tests: settings on the test's Redis database, the
Flask test client, and gunicorn with several workers as a real subprocess (started
with the shared `http_services` fixture, stopped after the test)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis
from ta_helpers import INTERNAL_TOKEN, SECRET, settings_env

from target_app.app import create_app
from target_app.settings import Settings
from tests.support.services import HttpService, target_app_gunicorn


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, webhook_secret=SECRET,
                    inventory={"sku-1": 1000, "sku-2": 5}, redis_timeout=2.0,
                    internal_token=INTERNAL_TOKEN)


@pytest.fixture
def rclient(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def client(settings: Settings):
    return create_app(settings).test_client()


@pytest.fixture
def gunicorn(settings: Settings, http_services: Callable[..., HttpService]) -> Callable[..., HttpService]:
    """`gunicorn(unsafe_disable=..., workers=4)` → the app under gunicorn on a free port, running."""
    numbers = itertools.count()

    def start(*, workers: int = 4, **overrides: Any) -> HttpService:
        if "unsafe_disable" in overrides:
            overrides["unsafe_disable"] = frozenset(overrides["unsafe_disable"])
        env = {**os.environ, **settings_env(replace(settings, **overrides))}

        def argv(port: int) -> list[str]:
            return target_app_gunicorn(port, workers=workers, options=("--backlog", "256"))

        return http_services(f"gunicorn-{next(numbers)}", argv, env=env)

    return start
