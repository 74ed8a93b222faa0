"""Redis clients for the target app: short timeouts and no automatic retries.

redis-py retries a command after a connection error or timeout by default. For a
non-idempotent script (create an order) a retry after a lost reply would run the
effect twice, so every client here has retries switched off; the caller sees the
error and answers 503. `decode=True` (the default) gives a text client,
`decode=False` a bytes client (the idempotency store replays bodies byte for byte).
"""

from __future__ import annotations

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry


def make_redis(url: str, *, timeout: float = 2.0, decode: bool = True) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                retry=Retry(NoBackoff(), 0), decode_responses=decode)
