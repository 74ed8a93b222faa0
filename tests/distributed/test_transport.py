"""The history transport between Locust workers and their master, without Locust:
batches in order and exactly once, back-pressure instead of loss when the master
is slow, the buffer kept when a waiting user is killed, the final batch at stop, and
the master writing one file per worker and acknowledging each batch.

A fake runner stands in for Locust's (`send_message`, `clients`, `greenlet`);
gevent runs the greenlets as Locust would, without monkey-patching this process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
import orjson
import pytest

from harness.history import HistoryError
from harness.load.transport import (
    ACK_MESSAGE,
    BATCH_MESSAGE,
    FINISH_MESSAGE,
    HistoryBatch,
    HistoryCollector,
    HistoryForwarder,
)


@dataclass
class Sent:
    type: str
    data: Any
    client_id: str | None


@dataclass
class FakeRunner:
    sent: list[Sent] = field(default_factory=list)

    def send_message(self, msg_type: str, data: Any = None, client_id: str | None = None) -> None:
        self.sent.append(Sent(msg_type, data, client_id))

    def batches(self) -> list[HistoryBatch]:
        return [HistoryBatch.from_message(s.data) for s in self.sent if s.type == BATCH_MESSAGE]


@dataclass
class Node:
    id: str
    state: str = "running"


@dataclass
class Msg:
    node_id: str
    data: Any


@dataclass
class FakeMaster(FakeRunner):
    clients_list: list[Node] = field(default_factory=list)
    greenlet: list[int] = field(default_factory=lambda: [1])  # a live message loop

    @property
    def clients(self) -> Any:
        return type("Clients", (), {"all": self.clients_list})()


def records_of(batches: list[HistoryBatch]) -> list[int]:
    return [orjson.loads(line)["n"] for b in batches for line in b.records.splitlines()]


def test_a_full_window_blocks_the_user_until_the_master_acknowledges() -> None:
    runner = FakeRunner()
    forwarder = HistoryForwarder(runner, "w1", batch_records=2, window=2, ack_timeout=5)
    writer = gevent.spawn(lambda: [forwarder.record({"n": n}) for n in range(10)])
    gevent.sleep(0.01)
    assert len(runner.batches()) == 2 and not writer.dead  # back-pressure: blocked, nothing dropped
    assert forwarder.unacknowledged == 6  # two batches in flight, one full batch buffered
    for _ in range(20):  # acknowledge as the master would, each batch once
        for batch in runner.batches():
            forwarder.on_ack(batch.sequence)
        gevent.sleep(0.01)
        if writer.dead:
            break
    assert writer.dead and writer.exception is None
    forwarder.finish()
    batches = runner.batches()
    assert records_of(batches) == list(range(10))  # in order, exactly once
    assert [b.sequence for b in batches] == list(range(1, len(batches) + 1))
    assert batches[-1].final and not any(b.final for b in batches[:-1])
    assert all(b.count == len(b.records.splitlines()) for b in batches)


def test_a_user_killed_while_waiting_loses_no_record() -> None:
    runner = FakeRunner()
    forwarder = HistoryForwarder(runner, "w1", batch_records=1, window=1, ack_timeout=5)
    writer = gevent.spawn(lambda: [forwarder.record({"n": n}) for n in range(3)])
    gevent.sleep(0.01)
    writer.kill()  # Locust stops a user that was waiting for the window
    forwarder.finish()  # at test_stop: never waits, may exceed the window by one batch
    assert records_of(runner.batches()) == [0, 1]
    assert runner.batches()[-1].final


def test_no_acknowledgement_for_long_is_an_error_not_a_silent_drop() -> None:
    runner = FakeRunner()
    forwarder = HistoryForwarder(runner, "w1", batch_records=1, window=1, ack_timeout=0.2)
    forwarder.record({"n": 0})
    with pytest.raises(HistoryError, match="acknowledged no history batch"):
        forwarder.record({"n": 1})
    forwarder.finish()
    assert records_of(runner.batches()) == [0, 1]  # the record that waited is still sent


def test_wait_acknowledged_is_bounded() -> None:
    runner = FakeRunner()
    forwarder = HistoryForwarder(runner, "w1")
    forwarder.record({"n": 0})
    forwarder.finish()
    assert forwarder.wait_acknowledged(0.1) is False
    gevent.spawn_later(0.05, forwarder.on_ack, runner.batches()[-1].sequence)
    assert forwarder.wait_acknowledged(2.0) is True
    assert forwarder.records_acked == forwarder.records_sent == 1


def test_the_master_writes_one_file_per_worker_and_acknowledges(tmp_path: Path) -> None:
    master = FakeMaster(clients_list=[Node("host-a_1"), Node("host-b_2")])
    collector = HistoryCollector(master)
    collector.begin(tmp_path / "histories")
    for node, worker in (("host-a_1", "w10h0001"), ("host-b_2", "w10h0002")):
        for sequence, final in ((1, False), (2, True)):
            batch = HistoryBatch(worker=worker, sequence=sequence, count=1,
                                 records=orjson.dumps({"n": sequence}) + b"\n", final=final)
            collector.on_batch(Msg(node, batch.to_message()))
    files = sorted(p.name for p in (tmp_path / "histories").iterdir())
    assert files == ["w10h0001.jsonl", "w10h0002.jsonl"]
    assert (tmp_path / "histories" / "w10h0001.jsonl").read_bytes() == b'{"n":1}\n{"n":2}\n'
    acks = [(s.client_id, s.data["sequence"]) for s in master.sent if s.type == ACK_MESSAGE]
    assert acks == [("host-a_1", 1), ("host-a_1", 2), ("host-b_2", 1), ("host-b_2", 2)]
    assert collector.finish_workers(1.0, reason="test") == []  # both sent their final batch
    assert not [s for s in master.sent if s.type == FINISH_MESSAGE]
    collector.close()


def test_the_master_asks_for_missing_final_batches_and_waits_bounded(tmp_path: Path) -> None:
    master = FakeMaster(clients_list=[Node("answers_1"), Node("silent_2"), Node("gone_3", "missing")])
    collector = HistoryCollector(master)
    collector.begin(tmp_path / "h")
    original = master.send_message

    def send(msg_type: str, data: Any = None, client_id: str | None = None) -> None:
        original(msg_type, data, client_id)
        if msg_type == FINISH_MESSAGE and client_id == "answers_1":
            final = HistoryBatch(worker="w1", sequence=1, count=0, records=b"", final=True)
            gevent.spawn_later(0.05, collector.on_batch, Msg("answers_1", final.to_message()))

    master.send_message = send  # type: ignore[method-assign]
    assert collector.finish_workers(0.5, reason="quitting") == ["silent_2"]
    asked = sorted(s.client_id for s in master.sent if s.type == FINISH_MESSAGE)
    assert asked == ["answers_1", "silent_2"]  # a missing worker is not waited for
    # After Locust killed its message loop, the master does not wait at all.
    master.greenlet.clear()
    collector.begin(tmp_path / "h")
    assert collector.finish_workers(30.0, reason="quitting") == ["answers_1", "silent_2"]
    collector.close()
