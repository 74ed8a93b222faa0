import threading
import time

import pytest
import redis

from harness.run.drain import DrainTimeout, stream_backlog, wait_for_drain
from harness.stack.info import StackInfo
from tests.support.stacks import sample_info


def _state(redis_url: str) -> StackInfo:
    return sample_info(redis_url=redis_url, stream="payments", group="target-app")


def test_no_stream_means_nothing_to_drain(redis_url: str) -> None:
    wait_for_drain(_state(redis_url), timeout=0.5)
    assert stream_backlog(redis.Redis.from_url(redis_url), "payments", "target-app") is None


def test_undelivered_and_pending_entries_block_the_drain(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.xgroup_create("payments", "target-app", id="0", mkstream=True)
    client.xadd("payments", {"message_id": "m1"})
    client.xadd("payments", {"message_id": "m2"})
    assert stream_backlog(client, "payments", "target-app") == 2
    with pytest.raises(DrainTimeout, match="2 entries left"):
        wait_for_drain(_state(redis_url), timeout=0.3)
    delivered = client.xreadgroup("target-app", "c1", {"payments": ">"}, count=1)
    assert stream_backlog(client, "payments", "target-app") == 2  # one pending, one lagging
    entry_id = delivered[0][1][0][0]
    client.xack("payments", "target-app", entry_id)
    assert stream_backlog(client, "payments", "target-app") == 1


def test_the_drain_returns_once_a_consumer_finished(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.xgroup_create("payments", "target-app", id="0", mkstream=True)
    for number in range(5):
        client.xadd("payments", {"message_id": f"m{number}"})

    def consume() -> None:
        time.sleep(0.3)
        consumer = redis.Redis.from_url(redis_url)
        for _, entries in consumer.xreadgroup("target-app", "c1", {"payments": ">"}, count=10):
            for entry_id, _ in entries:
                consumer.xack("payments", "target-app", entry_id)

    worker = threading.Thread(target=consume)
    worker.start()
    wait_for_drain(_state(redis_url), timeout=5)
    worker.join()
    assert stream_backlog(client, "payments", "target-app") == 0
