"""Read a stack's Redis settings for the report: `read_redis_settings(url)`.

The runner reads them on the direct Redis URL (never through the faulted proxy)
before the load and after the state was collected, and keeps both readings in the
run directory (`RunDir.write_redis_capture`, redis.json); the report warns when
they make idempotency records disposable (harness.report.run_facts). A reading
that fails (a Redis that renamed CONFIG, a stack that went away) is recorded with
its error and never fails the run: the settings explain a verdict, they are not one.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from harness.report.run_facts import RedisSettings

# Short: the reading must never hold a run up when Redis is gone.
READ_TIMEOUT = 2.0


def read_redis_settings(url: str, *, timeout: float = READ_TIMEOUT) -> RedisSettings:
    """maxmemory, maxmemory-policy, appendonly, save and INFO's evicted_keys of the
    Redis at `url`; a RedisSettings with `error` set when they cannot be read."""
    at = time.time()
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                  decode_responses=True)
    try:
        config = client.config_get("maxmemory*")
        config.update(client.config_get("appendonly"))
        config.update(client.config_get("save"))
        stats = client.info("stats")
    except redis.RedisError as error:
        return RedisSettings(at=at, error=f"{type(error).__name__}: {error}")
    finally:
        client.close()
    return RedisSettings(
        at=at,
        maxmemory=_int(config.get("maxmemory")),
        maxmemory_policy=_str(config.get("maxmemory-policy")),
        appendonly=None if config.get("appendonly") is None else _str(config.get("appendonly")) == "yes",
        save=_str(config.get("save")),
        evicted_keys=_int(stats.get("evicted_keys")),
    )


def _str(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return None if value is None else str(value)


def _int(value: Any) -> int | None:
    try:
        return int(_str(value) or "")
    except ValueError:
        return None
