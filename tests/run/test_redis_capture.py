"""The runner's reading of the stack's Redis settings (harness.run.redis_capture),
against a real redis-server of the test's own: a Redis that evicts is recorded as
such, and the report built from that record warns (issue 18, item 7)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from harness.ports import free_port
from harness.report.run_facts import RedisCapture, redis_warnings
from harness.report.run_report import write_reports
from harness.run.redis_capture import read_redis_settings
from harness.run.rundir import RunDir
from harness.stack.redis_server import INSTALL_HINT, RedisServer
from tests.report.report_sample import build_run, typed


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    # Not the session's shared server: this test changes its memory policy.
    if shutil.which("redis-server") is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    server = RedisServer(data_dir=tmp_path / "redis", appendonly=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_stack_like_the_runs_reads_as_noeviction_with_persistence(own_redis: RedisServer) -> None:
    reading = read_redis_settings(own_redis.url)
    assert reading.error is None
    assert reading.maxmemory == 0 and reading.maxmemory_policy == "noeviction"
    assert reading.appendonly is False and reading.save == ""
    assert reading.evicted_keys == 0
    assert redis_warnings(RedisCapture(before=reading, after=reading)) == []


def test_an_evicting_redis_is_recorded_with_the_keys_it_evicted(own_redis: RedisServer, tmp_path: Path) -> None:
    client = redis.Redis.from_url(own_redis.url)
    client.config_set("maxmemory", "3mb")
    client.config_set("maxmemory-policy", "allkeys-lru")
    before = read_redis_settings(own_redis.url)
    value = b"x" * 4096
    for start in range(0, 2000, 200):  # ~8 MB into 3 MB: bounded, and enough to evict
        pipe = client.pipeline(transaction=False)
        for n in range(start, start + 200):
            pipe.set(f"idem:{n}", value)
        pipe.execute()
    client.close()
    after = read_redis_settings(own_redis.url)
    assert before.maxmemory == 3 * 1024 * 1024 and before.maxmemory_policy == "allkeys-lru"
    assert after.evicted_keys is not None and after.evicted_keys > 0

    run_dir = RunDir.create(tmp_path, "r1")
    run_dir.write_redis_capture(RedisCapture(before=before, after=after))
    capture = run_dir.read_redis_capture()
    assert capture == RedisCapture(before=before, after=after)
    warnings = redis_warnings(capture)
    assert len(warnings) == 2
    assert "allkeys-lru" in warnings[0] and "noeviction" in warnings[0]
    assert f"evicted {after.evicted_keys - (before.evicted_keys or 0)} key(s)" in warnings[1]

    # And the report built from that run directory shows the warning.
    result = build_run(run_dir.path, failing=False)
    html = write_reports(run_dir, typed(result)).report_html.read_text()
    assert "id='warnings'" in html and "maxmemory-policy is allkeys-lru" in html


def test_a_redis_that_cannot_be_read_is_recorded_with_its_error() -> None:
    reading = read_redis_settings(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5)
    assert reading.error is not None and "Connection" in reading.error
    assert reading.maxmemory_policy is None
    assert redis_warnings(RedisCapture(before=reading)) == []
