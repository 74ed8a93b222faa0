"""One probe run's messages, from the first publish to the counted effects.

`MessagePlay(entries, run_dir, seed=..., duration=...)`, for the config's `messages:`:

1. `setup(upstream)`: each entry's producer connects and makes sure its queue exists;
   every fact its rounds will publish is counted by the entry's oracle first, and a
   fact that already has effects (an earlier run's rows, a query that counts too
   much) is set aside: it is not judged, and the run is inconclusive naming it;
2. `start()`: each watcher reads the broker's counters as they are before the first
   publish (a queue's counters cover its whole life: RabbitMQ's `redeliver` and
   `publish`, a stream's length); then the producers publish
   (harness.probe.messages.producer) over the first half of the load, while the
   watcher reads the broker's own counts (`Broker.stats()`) every `WATCH_INTERVAL`,
   each counter as its difference from that baseline, and keeps the highest
   redelivery count;
3. `stop()` after the load; then `finish(upstream)`, with the faults healed and the
   consumer still running: the drain. Until the entry's `drain_timeout`, it waits
   for every fact with a confirmed publish to have an effect (the entry's oracle,
   harness.probe.oracles, asked with `fact`) and for the broker to hold nothing
   unacknowledged, or for the broker to hold nothing while no new effect came for
   `SETTLE` seconds (what is missing then is lost, not late). "Holds nothing" is
   believed once its publish counter has caught up with the confirmed publishes, or
   once that counter stood still for `STATS_SETTLE` seconds (a restart loses what the
   broker counted last); then it counts every published fact's effects once more, reads
   the broker's final counts (waiting, within `STATS_GRACE`, until the broker has
   counted every confirmed publish: RabbitMQ's management statistics lag by seconds)
   and lists the dead letters. One `MessageOutcome` per entry, written to
   `messages.jsonl`; harness.probe.messages.checks judges them.

An oracle or broker that cannot answer is a HarnessError (exit 2): a run whose effects
cannot be counted proves nothing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from harness.history import history_files, iter_operations
from harness.probe.brokers import Broker, BrokerError, BrokerStats, open_broker
from harness.probe.config import MessageEndpoint
from harness.probe.messages.producer import Producer
from harness.probe.messages.spec import fact_of
from harness.probe.oracles import Oracle, open_oracle

OUTCOMES_FILE = "messages.jsonl"
WATCH_INTERVAL = 0.3
POLL = 0.3
STATS_GRACE = 15.0
SETTLE = 2.0  # the broker empty and no new effect for this long: the consumer is done
# After a broker restart its publish counter may never reach the confirmed publishes (what
# it counted just before the restart, or before its statistics first showed the queue, is
# lost with it): unchanged this long, longer than RabbitMQ's statistics interval (5 s),
# the reading is a fresh one, and the counter has caught up with what it will ever count.
STATS_SETTLE = 6.0
MAX_DEAD_LETTERS = 200
SPREAD_SHARE = 0.5  # the producers publish over this share of the load's duration


@dataclass
class MessageOutcome:
    """What the drain found for one `messages:` entry."""

    name: str
    broker: str
    effects: list[tuple[Any, int]] = field(default_factory=list)  # (fact, effects) per published fact
    drained: bool = False
    drain_seconds: float = 0.0
    backlog: int | None = None  # messages the broker still held unacknowledged at the end
    redeliveries: int | None = None  # the broker's own count (None: it cannot tell)
    stats_current: bool = False  # the broker had counted every confirmed publish when read
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    dead_letter_count: int | None = None  # dead letters added during the run
    preexisting: list[tuple[Any, int]] = field(default_factory=list)  # (fact, effects) before the first publish
    counts_before: dict[str, int | None] | None = None  # the broker's counters at the start (None: unreadable)


COUNTERS = ("redeliveries", "stored", "dead_letters")


class _PublishCount:
    """Whether the broker's publish counter has caught up with the confirmed publishes
    (`stored` of them): it has reached them, or the broker reports none, or it stayed
    the same for STATS_SETTLE seconds (a broker restarted meanwhile lost some counts)."""

    def __init__(self, stored: int) -> None:
        self.stored = stored
        self.current = False
        self._value: int | None = None
        self._since = time.monotonic()

    def see(self, stats: BrokerStats) -> BrokerStats:
        if stats.stored != self._value:
            self._value, self._since = stats.stored, time.monotonic()
        settled = stats.stored is not None and time.monotonic() - self._since >= STATS_SETTLE
        self.current = stats.stored is None or stats.stored >= self.stored or settled
        return stats


class _Watcher:
    """Reads a broker's counts on a thread of its own; keeps the highest redelivery count.

    `begin()` reads the counters before the run's first publish: a queue used before
    (an earlier run on the same queue) has counted that run's redeliveries and
    publishes too, and a count of 30 redeliveries from yesterday is no evidence that
    this run provoked one. `read()` returns each counter as its difference from that
    baseline. A counter the broker does not report yet (a RabbitMQ queue that never
    had a message has no `message_stats`) counts from zero. When the baseline cannot
    be read at all, `before_error` says why and the run's redeliveries are unknown.

    A broker's counters start again from zero when it restarts (RabbitMQ's management
    statistics do: a plan may restart a broker the probe owns), so a count lower than
    the last one read means a restart: what was counted before it is carried over, and
    `read()` returns the counts of the whole run (at least: what a restart swallowed
    between two reads is not seen)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.highest: int | None = None
        self.last: BrokerStats | None = None
        self.error: str | None = None
        self.before: dict[str, int | None] | None = None  # the counters at begin(), as read
        self.before_error: str | None = None
        self._raw: dict[str, int] = {}  # the broker's own last reading of each counter
        self._carried: dict[str, int] = {}  # counted before the broker's restarts
        self._baseline: dict[str, int] = {}  # subtracted from each counter (set by begin())
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="broker-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _across_restarts(self, counter: str, value: int | None) -> int | None:
        if value is None:
            return None
        last = self._raw.get(counter)
        if last is not None and value < last:
            self._carried[counter] = self._carried.get(counter, 0) + last
        self._raw[counter] = value
        return max(0, value + self._carried.get(counter, 0) - self._baseline.get(counter, 0))

    def begin(self) -> None:
        """Take the counters as they are now as the run's zero."""
        try:
            stats = self.read()
        except BrokerError as error:
            self.before_error = f"{type(error).__name__}: {error}"
            return
        self.before = {counter: getattr(stats, counter) for counter in COUNTERS}
        self._baseline = {counter: value or 0 for counter, value in self.before.items()}
        self.highest = None

    def read(self) -> BrokerStats:
        with self._lock:
            raw = self.broker.stats()
            stats = replace(raw, redeliveries=self._across_restarts("redeliveries", raw.redeliveries),
                            stored=self._across_restarts("stored", raw.stored),
                            # a level, not a counter (a restart keeps a durable queue's messages)
                            dead_letters=(max(0, raw.dead_letters - self._baseline.get("dead_letters", 0))
                                          if raw.dead_letters is not None else None))
            if stats.redeliveries is not None:
                self.highest = max(self.highest or 0, stats.redeliveries)
            self.last = stats
            return stats

    def read_or_unknown(self) -> BrokerStats:
        """`read()`, or nothing known while the broker cannot answer (it may be starting
        again after a restart): the caller waits for the counts, bounded by its deadline."""
        try:
            return self.read()
        except BrokerError as error:
            self.error = f"{type(error).__name__}: {error}"
            return BrokerStats(redeliveries=None, unacknowledged=None)

    def _run(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL):
            try:
                self.read()
            except Exception as error:  # noqa: BLE001 - a broker busy under faults: read again later
                self.error = f"{type(error).__name__}: {error}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class MessagePlay:
    """The producers and watchers of one run; a context manager (leaving it closes the
    watchers' connections). Without entries every step does nothing and `finish`
    returns None, so the runner calls the same steps whatever the config holds."""

    def __init__(self, entries: Sequence[MessageEndpoint], run_dir: Path, *, seed: int, nonce: str,
                 duration: float) -> None:
        self.entries = tuple(entries)
        self.run_dir = Path(run_dir)
        self.duration = duration
        self._started: float | None = None
        history = self.run_dir / "history"
        self.producers = [Producer(entry.spec, history, seed=seed, nonce=nonce, spread=duration * SPREAD_SHARE)
                          for entry in self.entries]
        self.watchers = [_Watcher(open_broker(entry.spec.target)) for entry in self.entries]
        self.preexisting: list[list[tuple[Any, int]]] = [[] for _ in self.entries]

    def setup(self, upstream: str) -> None:
        """Connect, declare the queues, and count the effects every planned fact has
        before the first publish (`preexisting`, one list per entry)."""
        for producer in self.producers:
            producer.setup()
        for index, (entry, producer) in enumerate(zip(self.entries, self.producers, strict=True)):
            oracle = open_oracle(entry.spec.name, entry.effects, upstream=upstream)
            try:
                counts = [(fact, oracle.count({"fact": fact}, {}).count) for fact in producer.planned_facts()]
            finally:
                oracle.close()
            self.preexisting[index] = [(fact, count) for fact, count in counts if count]

    def __enter__(self) -> MessagePlay:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def load_over(self, wait: float) -> bool:
        """After waiting up to `wait` seconds: True once the load's duration has passed
        since `start()` (the load's clock when there is no Locust)."""
        assert self._started is not None
        left = self._started + self.duration - time.monotonic()
        time.sleep(max(0.0, min(wait, left)))
        return time.monotonic() >= self._started + self.duration

    def start(self) -> None:
        for watcher in self.watchers:
            watcher.begin()  # before the first publish: the run's zero
        self._started = time.monotonic()
        for producer in self.producers:
            producer.start()
        for watcher in self.watchers:
            watcher.start()

    def stop(self) -> None:
        for producer in self.producers:
            producer.stop()
        errors = [producer.error for producer in self.producers if producer.error is not None]
        if errors:
            raise errors[0]

    def close(self) -> None:
        for watcher in self.watchers:
            watcher.stop()
            watcher.broker.close()

    def finish(self, upstream: str) -> list[MessageOutcome] | None:
        if not self.entries:
            return None
        operations = [op for op in iter_operations(history_files(self.run_dir / "history"))
                      if op.get("op") == "publish"]
        outcomes = []
        for entry, watcher, before in zip(self.entries, self.watchers, self.preexisting, strict=True):
            ops = [op for op in operations if op.get("message") == entry.spec.name]
            oracle = open_oracle(entry.spec.name, entry.effects, upstream=upstream)
            try:
                outcome = self._drain(entry, watcher, oracle, ops)
            finally:
                oracle.close()
            outcome.preexisting = list(before)
            outcome.counts_before = watcher.before
            if watcher.before_error is not None:
                outcome.redeliveries = None  # counted over the queue's life, not this run: unknown
            outcomes.append(outcome)
        with open(self.run_dir / OUTCOMES_FILE, "wb") as out:
            for outcome in outcomes:
                out.write(orjson.dumps(asdict(outcome)) + b"\n")
        return outcomes

    def _drain(self, entry: MessageEndpoint, watcher: _Watcher, oracle: Oracle,
               ops: Sequence[dict[str, Any]]) -> MessageOutcome:
        spec = entry.spec
        outcome = MessageOutcome(name=spec.name, broker=spec.broker)
        facts = list({json.dumps(op.get("fact")): op.get("fact") for op in ops}.values())
        confirmed = list({json.dumps(op.get("fact")): op.get("fact") for op in ops if op["type"] == "ok"}.values())
        stored = sum(1 for op in ops if op["type"] == "ok" and not op.get("duplicate"))
        started = time.monotonic()
        deadline = started + spec.drain_timeout
        waiting = list(confirmed)
        # A broker that reports its counts (all but RabbitMQ without `management:`) may not
        # have them yet (a restarted RabbitMQ reports a recovered queue seconds after it
        # accepts connections): unknown counts are waited for, never taken for an empty queue.
        reports = spec.broker != "rabbitmq" or spec.management is not None
        counted = _PublishCount(stored)
        stats = counted.see(watcher.read_or_unknown())
        progress = time.monotonic()
        while time.monotonic() < deadline:
            still = [fact for fact in waiting if oracle.count({"fact": fact}, {}).count == 0]
            if len(still) < len(waiting):
                progress = time.monotonic()
            waiting = still
            stats = counted.see(watcher.read_or_unknown())
            empty = stats.unacknowledged == 0 and counted.current
            # Drained: nothing waits, or the broker holds nothing and no effect came for a while (lost).
            known = stats.unacknowledged is not None or not reports
            if (not waiting and not stats.unacknowledged and known) or (empty and time.monotonic() - progress > SETTLE):
                outcome.drained = True
                break
            time.sleep(POLL)
        outcome.drain_seconds = round(time.monotonic() - started, 3)
        outcome.effects = [(fact, oracle.count({"fact": fact}, {}).count) for fact in facts]
        grace = time.monotonic() + STATS_GRACE
        # Counts not yet reported (a restarted broker's statistics start empty) are waited for too.
        while (not counted.current or (reports and stats.redeliveries is None)) and time.monotonic() < grace:
            time.sleep(POLL)
            stats = counted.see(watcher.read_or_unknown())
        outcome.stats_current = counted.current
        outcome.backlog = stats.unacknowledged
        outcome.redeliveries = (max(watcher.highest or 0, stats.redeliveries)
                                if stats.redeliveries is not None else watcher.highest)
        outcome.dead_letter_count = stats.dead_letters
        if spec.dead_letter and stats.dead_letters:
            outcome.dead_letters = _dead_letters(entry)
        return outcome


def _dead_letters(entry: MessageEndpoint) -> list[dict[str, Any]]:
    """The dead-lettered messages (id and fact), read without removing them."""
    spec = entry.spec
    reader = open_broker(spec.target)
    found: list[dict[str, Any]] = []
    try:
        for _ in range(MAX_DEAD_LETTERS):
            delivery = reader.receive(0.5, queue=spec.dead_letter)
            if delivery is None:
                break
            try:
                fact = fact_of(json.loads(delivery.body), spec.fact)
            except (ValueError, KeyError):
                fact = None
            found.append({"message_id": delivery.message_id, "fact": fact})
        reader.release()  # unacknowledged: the broker keeps them (RabbitMQ requeues them)
    finally:
        reader.close()
    return found
