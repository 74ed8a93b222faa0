"""Histories over Locust's own messaging: workers send batches, the master writes them.

A Locust worker (a forked `--processes` child, a `harness worker` / `locust --worker`
process, a compose container, another machine) does not write history files: its
`HistoryForwarder` sends batches of JSON lines to the master with
`runner.send_message`, and the master's `HistoryCollector` appends each worker's
batches to one file of its own in the run's history directory and acknowledges them.
One run directory on the master then holds every worker's history.

Messages (`register_message` on both sides; the payloads are the typed records below,
sent as plain dicts because Locust serialises with msgpack):

    harness_history         worker -> master   HistoryBatch
    harness_history_ack     master -> worker   HistoryAck (the batch is written and flushed)
    harness_history_finish  master -> worker   FinishRequest: stop the users, send the final batch

Bounded memory without losing anything: a worker has at most `window` batches sent
and not yet acknowledged. A user that fills a batch while the window is full waits
for an acknowledgement (a gevent wait: back-pressure slows the load, nothing is
dropped); its record is already buffered, so even a user killed while waiting loses
nothing. The buffer holds at most one batch plus one record per waiting user.

Nothing lost at stop, on each way Locust stops:
- a stop from the web UI or a shape: each worker's `test_stop` sends its final batch
  before Locust's `client_stopped`, and the master's own `test_stop` runs only after
  every worker reported stopped, so the master has every record by then (one
  connection per worker keeps order);
- a headless `--run-time` end or a SIGTERM of the master: the master's `test_stop` (or
  `quitting`) asks each worker that has not sent its final batch to finish, and waits
  (bounded) for the final batches before Locust sends `quit` to the workers;
- a SIGTERM of a worker: its `quitting` stops its users, sends the final batch and
  waits (bounded) for the master's acknowledgement before Locust tells the master it quit.
A worker never waits for an acknowledgement inside a message handler: Locust's worker
receives messages in that same greenlet, so the acknowledgement could not arrive.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import gevent
import gevent.event
import orjson

from harness.history import HistoryError
from harness.names import HISTORY_SUFFIX

BATCH_MESSAGE = "harness_history"
ACK_MESSAGE = "harness_history_ack"
FINISH_MESSAGE = "harness_history_finish"
BATCH_RECORDS = 256
WINDOW = 8
ACK_TIMEOUT = 60.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HistoryBatch:
    """Records of one worker, in order: `records` is `count` JSON lines."""

    worker: str  # the worker's name in process ids (w<pid>h<host>), also its file name
    sequence: int  # 1, 2, ... per worker process
    count: int
    records: bytes
    final: bool  # the last batch of this test: the worker's users have stopped

    def to_message(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_message(cls, data: Any) -> HistoryBatch:
        try:
            return cls(worker=str(data["worker"]), sequence=int(data["sequence"]),
                       count=int(data["count"]), records=bytes(data["records"]),
                       final=bool(data["final"]))
        except (KeyError, TypeError, ValueError) as error:
            raise HistoryError(f"malformed history batch: {error}") from error


@dataclass(frozen=True)
class HistoryAck:
    sequence: int

    def to_message(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FinishRequest:
    reason: str

    def to_message(self) -> dict[str, Any]:
        return asdict(self)


class HistoryForwarder:
    """A worker's history sink: `record()` like a HistoryWriter, batches go to the master."""

    def __init__(self, runner: Any, worker: str, *, batch_records: int = BATCH_RECORDS,
                 window: int = WINDOW, ack_timeout: float = ACK_TIMEOUT) -> None:
        self.runner = runner
        self.worker = worker
        self.batch_records = batch_records
        self.window = window
        self.ack_timeout = ack_timeout
        self._buffer: list[bytes] = []
        self._sequence = 0
        self._unacked: dict[int, int] = {}  # sequence -> records in it
        self._acked = gevent.event.Event()
        self.records_sent = 0
        self.records_acked = 0

    @property
    def unacknowledged(self) -> int:
        """Records buffered or sent and not yet acknowledged."""
        return len(self._buffer) + sum(self._unacked.values())

    def record(self, record: dict[str, Any]) -> None:
        self._buffer.append(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        if len(self._buffer) >= self.batch_records:
            self._wait_for_window()
            if self._buffer:  # another user may have sent it while this one waited
                self._send(final=False)

    def flush(self) -> None:
        """Send what is buffered (from a timer, so idle load still reaches the master)."""
        if self._buffer:
            self._wait_for_window()
            if self._buffer:
                self._send(final=False)

    def finish(self) -> None:
        """Send the final batch of a test, even empty: the master counts finals.

        Never waits (it runs inside Locust's worker message loop at a stop); the
        window may be exceeded by this one batch.
        """
        self._send(final=True)

    def on_ack(self, ack_sequence: int) -> None:
        count = self._unacked.pop(ack_sequence, 0)
        self.records_acked += count
        self._acked.set()

    def wait_acknowledged(self, timeout: float) -> bool:
        """True once every batch sent was acknowledged (from a greenlet other than
        the worker's message loop)."""
        deadline = time.monotonic() + timeout
        while self._unacked:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._acked.clear()
            self._acked.wait(timeout=min(remaining, 0.5))
        return True

    def _wait_for_window(self) -> None:
        deadline = time.monotonic() + self.ack_timeout
        while len(self._unacked) >= self.window:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise HistoryError(
                    f"the Locust master acknowledged no history batch for {self.ack_timeout:g} s "
                    f"({self.unacknowledged} records held)")
            self._acked.clear()
            self._acked.wait(timeout=remaining)

    def _send(self, *, final: bool) -> None:
        records, self._buffer = self._buffer, []
        self._sequence += 1
        batch = HistoryBatch(worker=self.worker, sequence=self._sequence, count=len(records),
                             records=b"".join(records), final=final)
        self._unacked[batch.sequence] = batch.count
        try:
            self.runner.send_message(BATCH_MESSAGE, batch.to_message())
        except Exception:
            # Not sent: keep the records for the next attempt rather than lose them.
            del self._unacked[batch.sequence]
            self._buffer = records + self._buffer
            raise
        self.records_sent += batch.count


class HistoryCollector:
    """The master's side: one file per worker under the history directory."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.directory: Path | None = None
        self._files: dict[str, IO[bytes]] = {}  # worker node id -> its file
        self._names: dict[str, str] = {}  # worker node id -> file name
        self._finals: set[str] = set()
        self.records = 0

    def begin(self, directory: Path | None) -> None:
        """A test starts: records go to `directory` (None: acknowledged, not written)."""
        if directory != self.directory:
            self.close()
            self.directory = directory
        self._finals.clear()

    def on_batch(self, msg: Any) -> None:
        batch = HistoryBatch.from_message(msg.data)
        if self.directory is not None and batch.count:
            handle = self._file_for(msg.node_id, batch.worker)
            handle.write(batch.records)
            handle.flush()
            self.records += batch.count
        if batch.final:
            self._finals.add(msg.node_id)
        self.runner.send_message(ACK_MESSAGE, HistoryAck(batch.sequence).to_message(),
                                 client_id=msg.node_id)

    def finish_workers(self, timeout: float, *, reason: str) -> list[str]:
        """Ask connected workers without a final batch to send it; wait at most
        `timeout`. Returns the workers that never sent one."""
        if not self._listening():
            return self._pending()
        pending = self._pending()
        for node_id in pending:
            self.runner.send_message(FINISH_MESSAGE, FinishRequest(reason).to_message(), client_id=node_id)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            gevent.sleep(0.05)
            pending = self._pending()
        if pending:
            logger.error("harness: no final history batch from workers %s within %.0f s; "
                         "their last records may be missing", ", ".join(pending), timeout)
        return pending

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()
        self._names.clear()

    def _pending(self) -> list[str]:
        connected = [node.id for node in self.runner.clients.all if node.state != "missing"]
        return [node_id for node_id in connected if node_id not in self._finals]

    def _listening(self) -> bool:
        # After runner.quit() Locust has killed the greenlets that receive messages.
        return len(self.runner.greenlet) > 0

    def _file_for(self, node_id: str, worker: str) -> IO[bytes]:
        handle = self._files.get(node_id)
        if handle is not None:
            return handle
        assert self.directory is not None
        name = worker if worker not in self._names.values() else f"{worker}-{node_id[-8:]}"
        self.directory.mkdir(parents=True, exist_ok=True)
        handle = open(self.directory / f"{name}{HISTORY_SUFFIX}", "ab")
        self._files[node_id] = handle
        self._names[node_id] = name
        return handle
