"""Small local stacks for the tests that need a real one (stack, web UI).

`small_settings(root, **overrides)` is the stack every such test starts unless it says
otherwise: two app workers and one consumer (the least that still shows concurrency
and the message path), on free loopback ports under `root`. `sample_info(**overrides)`
is a complete `StackInfo` (a local stack's, unless overridden) for tests that need a
state file but no stack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.stack.info import ServiceInfo, StackInfo
from harness.stack.local import StackSettings


def small_settings(root: Path, **overrides: Any) -> StackSettings:
    """StackSettings of a small stack under `root`; `overrides` replace any field."""
    values: dict[str, Any] = {"root": root, "app_workers": 2, "consumers": 1, "health_timeout": 20.0}
    values.update(overrides)
    return StackSettings(**values)


def sample_info(**overrides: Any) -> StackInfo:
    """A complete, valid StackInfo of a local stack on made-up ports; `overrides` replace any field."""
    values: dict[str, Any] = {
        "mode": "local", "phase": "running", "started_at": 1700000000.0, "root": "/tmp/h",
        "app_url": "http://127.0.0.1:1111", "app_direct_url": "http://127.0.0.1:1112",
        "toxiproxy_url": "http://127.0.0.1:3333", "toxiproxy_kind": "embedded",
        "redis_url": "redis://127.0.0.1:2222/0", "redis_proxy_url": "redis://127.0.0.1:2223/0",
        "webhook_secret": "stack-secret", "internal_token": "stack-token",
        "stream": "payments", "group": "target-app", "proxy_prefix": "",
        "proxies": {"app": "app", "redis": "redis"}, "owner": "up", "unsafe_disable": (),
        "app_workers": 2, "consumers": 1, "supervisor_pid": 1, "control_socket": "/tmp/h/control.sock",
        "services": (ServiceInfo("redis", 10, 2222, "/tmp/h/logs/redis.log", "running"),
                     ServiceInfo("consumer-1", None, None, "/tmp/h/logs/consumer-1.log", "killed")),
    }
    if overrides.get("mode") == "compose":
        values.update(supervisor_pid=None, control_socket=None, compose_file="/srv/docker-compose.yml",
                      project="idempotency-harness", health_timeout=30.0)
    values.update(overrides)
    return StackInfo(**values)
