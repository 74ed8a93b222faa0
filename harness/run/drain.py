"""After the load: wait for the consumers to drain the stream, then export the state.

Both read the stack through its `StackInfo` (a state.json object as read is taken
too): the direct Redis URL, the stream and group for the drain; the app's direct
URL and internal token for the export (docs/internals.md, "State export").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import redis
import requests

from harness.errors import HarnessError
from harness.stack.info import StackInfo


class DrainTimeout(HarnessError):
    """The consumers did not finish the stream within the bounded wait."""


def stream_backlog(client: redis.Redis, stream: str, group: str) -> int | None:
    """Entries not yet handled by the group: never delivered (lag) plus pending.

    None when the stream or group does not exist (nothing was published).
    """
    try:
        groups = client.xinfo_groups(stream)
    except redis.ResponseError:
        return None
    for info in groups:
        name = info.get("name")
        if isinstance(name, bytes):
            name = name.decode()
        if name != group:
            continue
        lag = info.get("lag")
        if lag is None:
            # Redis cannot tell the lag after deletions; fall back to comparing ids.
            last = client.xinfo_stream(stream).get("last-generated-id")
            lag = 0 if info.get("last-delivered-id") == last else 1
        return int(info.get("pending", 0)) + int(lag)
    return None


def wait_for_drain(stack: StackInfo, *, timeout: float, poll: float = 0.2) -> None:
    """Block until the consumer group has no lag and nothing pending, or raise DrainTimeout."""
    stream, group = stack.stream, stack.group
    client = redis.Redis.from_url(stack.redis_url, socket_timeout=5)
    deadline = time.monotonic() + timeout
    backlog: int | None = None
    try:
        while True:
            try:
                backlog = stream_backlog(client, stream, group)
            except redis.RedisError as error:
                raise HarnessError(f"could not read the stream {stream!r} to drain it: {error}") from error
            if not backlog:
                return
            if time.monotonic() >= deadline:
                raise DrainTimeout(
                    f"the consumers did not drain stream {stream!r} within {timeout:g}s "
                    f"({backlog} entries left)"
                )
            time.sleep(poll)
    finally:
        client.close()


def _export_response(app_url: str, token: str | None, timeout: float) -> requests.Response:
    """The open streaming answer of `GET /internal/v1/export` (the app's internal token
    in `Authorization`), or a HarnessError that says why there is none."""
    url = app_url.rstrip("/") + "/internal/v1/export"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = requests.get(url, stream=True, timeout=timeout, headers=headers)
    except requests.RequestException as error:
        raise HarnessError(f"state export failed: {error}") from error
    if response.status_code != 200:
        response.close()
        hint = " (the app's internal token was refused)" if response.status_code in (401, 404) else ""
        raise HarnessError(f"state export failed: {url} answered {response.status_code}{hint}")
    return response


def iter_export(app_url: str, *, token: str | None = None, timeout: float = 60.0) -> Iterator[dict[str, Any]]:
    """The export's records, parsed as they stream in."""
    with _export_response(app_url, token, timeout) as response:
        try:
            for line in response.iter_lines():
                if line.strip():
                    yield orjson.loads(line)
        except requests.RequestException as error:
            raise HarnessError(f"state export failed: {error}") from error


def export_state(app_url: str, destination: Path, *, token: str | None = None,
                 timeout: float = 60.0) -> int:
    """Stream `GET /internal/v1/export` into a file; returns the number of lines."""
    lines = 0
    with _export_response(app_url, token, timeout) as response, open(destination, "wb") as handle:
        try:
            for chunk in response.iter_content(chunk_size=65536):
                handle.write(chunk)
                lines += chunk.count(b"\n")
        except requests.RequestException as error:
            raise HarnessError(f"state export failed: {error}") from error
    return lines
