"""Fixtures for the target app's tests: settings on the test's Redis database, the
Flask test client, and gunicorn with several workers as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis
import requests

from harness.ports import free_port
from target_app.app import create_app
from target_app.settings import Settings

from ta_helpers import INTERNAL_TOKEN, ROOT, SECRET, settings_env



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


class Gunicorn:
    def __init__(self, settings: Settings, workers: int, log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, **settings_env(settings)}
        self.log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--workers", str(workers), "--bind",
             f"127.0.0.1:{self.port}", "--backlog", "256", "--log-level", "warning",
             "target_app.wsgi:app"],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.log_path = log_path

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                if requests.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("gunicorn did not come up:\n" + self.log_path.read_text(errors="replace")[-3000:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.log.close()


@pytest.fixture
def gunicorn(settings: Settings, tmp_path: Path) -> Iterator[Callable[..., Gunicorn]]:
    """`gunicorn(unsafe_disable=..., workers=4)` → a running server on a free port."""
    started: list[Gunicorn] = []

    def start(*, workers: int = 4, **overrides) -> Gunicorn:
        if "unsafe_disable" in overrides:
            overrides["unsafe_disable"] = frozenset(overrides["unsafe_disable"])
        server = Gunicorn(replace(settings, **overrides), workers, tmp_path / f"gunicorn-{len(started)}.log")
        started.append(server)
        server.wait_ready()
        return server

    yield start
    for server in started:
        server.stop()
