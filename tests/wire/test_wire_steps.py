"""Steps seen on the wire and faults at a step, through the embedded Toxiproxy with
RESP parsing on in front of a real redis-server (harness.toxiproxy.steps): the
steps a redis-py client makes, and a child process doing INCRs killed, paused or
cut exactly at a step, checked on Redis's own counter."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from redis.backoff import NoBackoff
from redis.retry import Retry

from harness.stack.redis_server import RedisServer
from harness.toxiproxy.server import EmbeddedToxiproxy
from harness.toxiproxy.steps_client import ProxySteps, StepApiError

COUNTER_STEP = "redis INCR counter:* worker"

CHILD = textwrap.dedent(
    """
    import sys
    import redis
    host, port, db, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    client = redis.Redis(host=host, port=port, db=db)
    for _ in range(limit):
        client.execute_command("INCR", "counter:7")
    """
)


def _proxy(toxiproxy: EmbeddedToxiproxy, name: str, upstream: str) -> int:
    body = {"name": name, "listen": "127.0.0.1:0", "upstream": upstream}
    response = requests.post(f"{toxiproxy.url}/proxies", json=body, timeout=5)
    assert response.status_code == 201, response.text
    return int(response.json()["listen"].rsplit(":", 1)[1])


@pytest.fixture
def redis_proxy(embedded_toxiproxy: EmbeddedToxiproxy, redis_server: RedisServer) -> tuple[int, ProxySteps]:
    port = _proxy(embedded_toxiproxy, "redis", f"{redis_server.host}:{redis_server.port}")
    return port, ProxySteps(embedded_toxiproxy.url, "redis")


def _db(redis_url: str) -> int:
    return int(redis_url.rsplit("/", 1)[1])


def _fired(steps: ProxySteps) -> dict[str, Any]:
    """The one trigger's record once its verification is settled (it polls /proc)."""
    while True:
        (trigger,) = steps.triggers()
        fired = trigger["fired"]
        if fired is not None and fired["verified"] is not None:
            return dict(fired)
        time.sleep(0.02)


@pytest.fixture
def child(
    tmp_path: Path, redis_proxy: tuple[int, ProxySteps], redis_url: str
) -> Iterator[Callable[[int], subprocess.Popen[bytes]]]:
    script = tmp_path / "incr_loop.py"
    script.write_text(CHILD)
    started: list[subprocess.Popen[bytes]] = []

    def start(limit: int) -> subprocess.Popen[bytes]:
        argv = [sys.executable, str(script), "127.0.0.1", str(redis_proxy[0]), str(_db(redis_url)), str(limit)]
        process = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_plain_proxy_parses_nothing(redis_proxy: tuple[int, ProxySteps], redis_url: str) -> None:
    port, steps = redis_proxy
    assert steps.wire() == {"protocol": None}
    redis.Redis(port=port, db=_db(redis_url)).set("a", "1")
    with pytest.raises(StepApiError, match="409"):
        steps.steps()


def test_steps_of_a_set_a_pipeline_and_a_transaction(redis_proxy: tuple[int, ProxySteps], redis_url: str) -> None:
    port, steps = redis_proxy
    steps.watch("redis", role="app")
    client = redis.Redis(port=port, db=_db(redis_url))
    client.set("order:42:payment", "a")
    plain = client.pipeline(transaction=False)
    plain.set("order:43:payment", "b").get("order:43:payment")
    assert plain.execute() == [True, b"b"]
    transaction = client.pipeline(transaction=True)
    transaction.set("order:44:payment", "c").rpush("queue:1", "x")
    assert transaction.execute() == [True, 1]
    seen = steps.steps()
    assert seen["redis SET order:*:payment app"] == 2
    assert seen["redis GET order:*:payment app"] == 1
    assert seen["redis MULTI[SET,RPUSH]EXEC order:*:payment app"] == 1
    assert not any(" MULTI " in step or " EXEC " in step or " RPUSH " in step for step in seen)
    assert steps.wire()["unparsed"] == 0


def test_garbage_passes_untouched_and_is_counted(embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    listener = socket.create_server(("127.0.0.1", 0))

    def echo() -> None:
        connection, _ = listener.accept()
        with connection:
            while data := connection.recv(65536):
                connection.sendall(data)

    threading.Thread(target=echo, daemon=True).start()
    port = _proxy(embedded_toxiproxy, "echo", f"127.0.0.1:{listener.getsockname()[1]}")
    steps = ProxySteps(embedded_toxiproxy.url, "echo")
    steps.watch("redis", role="app")
    garbage = b"PING\r\n*x\r\n\x00\xff binary" * 3
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(garbage)
        got = b""
        while len(got) < len(garbage):
            got += client.recv(65536)
    assert got == garbage
    wire = steps.wire()
    assert wire["unparsed"] == 1
    listener.close()


def test_bad_requests_are_refused(redis_proxy: tuple[int, ProxySteps]) -> None:
    _, steps = redis_proxy
    with pytest.raises(StepApiError, match="unknown protocol"):
        steps.watch("postgresql-maybe")
    steps.watch("redis")
    with pytest.raises(StepApiError, match="action must be"):
        steps.arm("explode", "redis SET - app")
    with pytest.raises(StepApiError, match="duration_ms"):
        steps.arm("pause", "redis SET - app")


def test_crash_before_incr_kills_the_sender_and_the_command_never_arrives(
    redis_proxy: tuple[int, ProxySteps], redis_url: str, child: Callable[[int], subprocess.Popen[bytes]]
) -> None:
    _, steps = redis_proxy
    steps.watch("redis", role="worker")
    steps.arm("before", COUNTER_STEP, occurrence=5)
    process = child(1000)
    assert process.wait(timeout=30) == -9
    assert redis.Redis.from_url(redis_url).get("counter:7") == b"4"
    fired = _fired(steps)
    assert fired["pid"] == process.pid and fired["verified"] is True
    assert fired["step"] == "redis INCR counter:* worker"


def test_crash_after_incr_delivers_then_kills_and_nothing_more_arrives(
    redis_proxy: tuple[int, ProxySteps], redis_url: str, child: Callable[[int], subprocess.Popen[bytes]]
) -> None:
    _, steps = redis_proxy
    steps.watch("redis", role="worker")
    steps.arm("after", COUNTER_STEP, occurrence=5)
    process = child(1000)
    assert process.wait(timeout=30) == -9
    assert redis.Redis.from_url(redis_url).get("counter:7") == b"5"
    assert steps.steps()[COUNTER_STEP] == 5
    fired = _fired(steps)
    assert fired["pid"] == process.pid and fired["verified"] is True


def test_pause_after_incr_stops_then_continues_the_sender(
    redis_proxy: tuple[int, ProxySteps], redis_url: str, child: Callable[[int], subprocess.Popen[bytes]]
) -> None:
    _, steps = redis_proxy
    steps.watch("redis", role="worker")
    steps.arm("pause", COUNTER_STEP, occurrence=3, duration_ms=200)
    process = child(10)
    assert process.wait(timeout=30) == 0
    assert redis.Redis.from_url(redis_url).get("counter:7") == b"10"
    fired = _fired(steps)
    assert fired["pid"] == process.pid and fired["verified"] is True  # seen stopped ('T')
    assert fired["resumed_at"] >= fired["at"]


def test_error_after_incr_loses_the_reply_but_not_the_effect(
    redis_proxy: tuple[int, ProxySteps], redis_url: str
) -> None:
    port, steps = redis_proxy
    steps.watch("redis", role="app")
    steps.arm("error", "redis INCR counter:* app")
    # No retries: a retry would send the INCR again and hide the lost reply.
    client = redis.Redis(port=port, db=_db(redis_url), retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.ConnectionError):
        client.execute_command("INCR", "counter:7")
    assert redis.Redis.from_url(redis_url).get("counter:7") == b"1"
    fired = _fired(steps)
    assert fired["action"] == "error" and fired["verified"] is True


def test_resp3_replies_pair_with_their_commands(redis_proxy: tuple[int, ProxySteps], redis_url: str) -> None:
    port, steps = redis_proxy
    steps.watch("redis", role="service")
    client = redis.Redis(port=port, db=_db(redis_url), protocol=3)
    client.hset("h:1", mapping={"a": "1", "b": "2"})
    assert client.hgetall("h:1") == {b"a": b"1", b"b": b"2"}  # a RESP3 map
    steps.arm("error", "redis HGETALL h:* service")
    client_no_retry = redis.Redis(port=port, db=_db(redis_url), protocol=3, retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.ConnectionError):
        client_no_retry.hgetall("h:2")
    wire = steps.wire()
    assert wire["steps"]["redis HSET h:* service"] == 1
    assert wire["steps"]["redis HGETALL h:* service"] == 2
    assert wire["steps"]["redis HELLO - service"] == 2
    assert wire["unparsed"] == wire["untracked"] == 0


def test_before_in_a_pipeline_holds_that_command_and_spares_the_proxys_own_process(
    redis_proxy: tuple[int, ProxySteps], redis_url: str
) -> None:
    port, steps = redis_proxy
    steps.watch("redis", role="app")
    steps.arm("before", "redis INCR counter:* app", occurrence=2)
    client = redis.Redis(port=port, db=_db(redis_url), retry=Retry(NoBackoff(), 0))
    pipe = client.pipeline(transaction=False)
    for _ in range(3):
        pipe.execute_command("INCR", "counter:7")
    with pytest.raises(redis.ConnectionError):
        pipe.execute()
    # The first INCR of the chunk went on, the second was held with all after it.
    assert redis.Redis.from_url(redis_url).get("counter:7") == b"1"
    fired = _fired(steps)
    # This test's process owns the socket and runs the proxy: it is never signalled.
    assert fired["pid"] == os.getpid() and fired["verified"] is False
    assert "own process" in fired["error"]
