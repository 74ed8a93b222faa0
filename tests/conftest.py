"""Fixtures shared by every test package.

One private redis-server per test session on a free loopback port; each test that
asks for `redis_url` gets its own logical database, flushed before use.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator

import pytest
import redis

from harness.redis_server import INSTALL_HINT, RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    server = RedisServer(data_dir=tmp_path_factory.mktemp("redis"), appendonly=False)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _database_numbers() -> Iterator[int]:
    # Database 0 is left alone; 1..63 are handed out round-robin and flushed.
    return itertools.cycle(range(1, 64))


@pytest.fixture
def redis_url(redis_server: RedisServer, _database_numbers: Iterator[int]) -> str:
    number = next(_database_numbers)
    url = f"redis://{redis_server.host}:{redis_server.port}/{number}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url
