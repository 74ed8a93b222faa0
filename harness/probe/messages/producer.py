"""The probe's message producer: the duplicates a real producer and broker make, on purpose.

`Producer(spec, history_dir, seed=..., nonce=...)` publishes `spec.count` logical messages (each
with a fact of its own) through two broker connections (harness.probe.brokers), paced
over `spread` seconds, each logical message played as one round:

| kind | what it plays |
|---|---|
| `first` | a new message: a new id, a new fact |
| `duplicate` | the same id and body again, a few rounds later (a producer's retry after a lost confirm) |
| `concurrent_duplicate` | the same id and body twice at once, on the two connections |
| `same_fact_new_id` | the same body (the same business fact) under a new message id: only the domain's own key stops it |
| `burst` | several new messages back to back |

The seed fixes the sequence of kinds; the message ids and generated values come from
the seed and the run's nonce, so two runs with one seed play the same rounds with
facts of their own (a rerun against the same database finds none of an earlier run's
rows: they would be counted as this run's effects). `planned_facts()` lists every fact the
rounds will publish, known before the first publish.

Every publish is one operation of the probe's history (`op: publish`, `expect` and
`kind` the kind, `message`, `message_id`, `fact`): `ok` once the broker confirmed it
(`duplicate: true` when the broker itself dropped it as a copy, as JetStream does
within its window), `info` when no confirm came (it may or may not be stored). The
history files are `history/messages-<name>-<a|b>.jsonl`, beside the endpoints' ones.
Bounded in count (`spec.count`) and time (`stop()`, the `deadline`).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.history import Client, HistoryWriter, history_path
from harness.probe.brokers import Broker, Message, PublishAck, open_broker
from harness.probe.messages.spec import MessageSpec, fact_of

KINDS = ("first", "duplicate", "concurrent_duplicate", "same_fact_new_id", "burst")
ROUNDS = (("first", 0.3), ("duplicate", 0.2), ("concurrent_duplicate", 0.2), ("same_fact_new_id", 0.18),
          ("burst", 0.12))
BURST = 4
DUPLICATE_AFTER = 3  # rounds between a message and its later duplicate
KIND_HEADER = "x-probe-kind"


@dataclass(frozen=True)
class Planned:
    kind: str
    message_id: str
    body: bytes
    fact: Any
    headers: Mapping[str, Any] = field(default_factory=dict)  # the entry's `headers:`, rendered
    properties: Mapping[str, Any] = field(default_factory=dict)  # the entry's `properties:`, rendered


class _Publisher:
    """One broker connection, used only by its own thread, and the history of its publishes."""

    def __init__(self, spec: MessageSpec, history_dir: Path, side: str,
                 opener: Callable[[MessageSpec], Broker]) -> None:
        self.spec = spec
        self._opener = opener
        self._broker: Broker | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"publish-{side}")
        worker = f"messages-{spec.name}-{side}"
        self._writer = HistoryWriter(history_path(history_dir, worker=worker), flush_interval=0.5)
        self._client = Client(self._writer, worker=worker, user=0)
        self.confirmed = 0
        self.unconfirmed = 0

    def submit(self, planned: Planned) -> Future[PublishAck]:
        return self._pool.submit(self._publish, planned)

    def setup(self) -> None:
        self._pool.submit(self._open).result()

    def _open(self) -> Broker:
        if self._broker is None:
            self._broker = self._opener(self.spec)
            self._broker.setup()
        return self._broker

    def _publish(self, planned: Planned) -> PublishAck:
        operation = self._client.invoke("publish", expect=planned.kind, kind=planned.kind, message=self.spec.name,
                                        message_id=planned.message_id, fact=planned.fact, broker=self.spec.broker)
        ack = self._open().publish(Message(planned.message_id, planned.body, {**planned.headers, KIND_HEADER: planned.kind},
                                           planned.properties))
        if ack.confirmed:
            self.confirmed += 1
            operation.ok(confirmed=True, duplicate=ack.duplicate, position=ack.position)
        else:
            self.unconfirmed += 1
            operation.info(confirmed=False, error=ack.error)
        return ack

    def close(self) -> None:
        def shut() -> None:
            if self._broker is not None:
                self._broker.close()

        try:
            self._pool.submit(shut).result(timeout=15)
        finally:
            self._pool.shutdown(wait=True)
            self._writer.close()


class Producer:
    """Plays `spec.count` logical messages on a thread of its own; `start()`, `stop()`."""

    def __init__(self, spec: MessageSpec, history_dir: Path, *, seed: int, nonce: str, spread: float,
                 opener: Callable[[MessageSpec], Broker] = lambda spec: open_broker(spec.target)) -> None:
        self.spec = spec
        self.spread = spread
        self.kinds = random.Random(f"{seed}:{spec.name}")  # the rounds' kinds: the seed's alone
        self.rng = random.Random(f"{seed}:{nonce}:{spec.name}")  # ids and values: this run's own
        self._rounds: list[list[Planned | tuple[Planned, Planned]]] | None = None
        self._a = _Publisher(spec, history_dir, "a", opener)
        self._b = _Publisher(spec, history_dir, "b", opener)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.facts = 0

    def setup(self) -> None:
        """Connect and declare the queue before the consumer starts (BrokerError if it cannot)."""
        self._a.setup()
        self._b.setup()

    @property
    def published(self) -> tuple[int, int]:
        """(confirmed, unconfirmed) publishes so far."""
        return self._a.confirmed + self._b.confirmed, self._a.unconfirmed + self._b.unconfirmed

    def _new(self, kind: str) -> Planned:
        message_id = f"msg-{self.rng.getrandbits(64):016x}"
        body = self.spec.render(self.rng, message_id)
        headers, properties = self.spec.render_envelope(self.rng, message_id)
        self.facts += 1
        return Planned(kind, message_id, json.dumps(body).encode(), fact_of(body, self.spec.fact), headers, properties)

    def _renamed(self, planned: Planned, kind: str) -> Planned:
        """The same body (the same fact), headers and properties under a new message id."""
        message_id = f"msg-{self.rng.getrandbits(64):016x}"

        def renamed(values: Mapping[str, Any]) -> dict[str, Any]:
            return {name: value.replace(planned.message_id, message_id) if isinstance(value, str) else value
                    for name, value in values.items()}

        return Planned(kind, message_id, planned.body.replace(planned.message_id.encode(), message_id.encode()),
                       planned.fact, renamed(planned.headers), renamed(planned.properties))

    def plan(self) -> list[list[Planned | tuple[Planned, Planned]]]:
        """The rounds: each a list of publishes (a pair is published concurrently);
        planned once, the same list on every call."""
        if self._rounds is None:
            self._rounds = self._plan()
        return self._rounds

    def planned_facts(self) -> list[Any]:
        """Every distinct fact the rounds publish, in the order of their first publish."""
        found: dict[str, Any] = {}
        for publishes in self.plan():
            for publish in publishes:
                for planned in publish if isinstance(publish, tuple) else (publish,):
                    found.setdefault(json.dumps(planned.fact, sort_keys=True), planned.fact)
        return list(found.values())

    def _plan(self) -> list[list[Planned | tuple[Planned, Planned]]]:
        rounds: list[list[Planned | tuple[Planned, Planned]]] = []
        later: dict[int, list[Planned]] = {}
        kinds = [kind for kind, _ in ROUNDS]
        weights = [weight for _, weight in ROUNDS]
        for index in range(self.spec.count):
            kind = self.kinds.choices(kinds, weights)[0] if index else "first"
            publishes: list[Planned | tuple[Planned, Planned]] = list(later.pop(index, []))
            if kind == "burst":
                publishes += [self._new("burst") for _ in range(BURST)]
            else:
                first = self._new("first")
                if kind == "concurrent_duplicate":
                    publishes.append((first, replace(first, kind="concurrent_duplicate")))
                else:
                    publishes.append(first)
                if kind == "duplicate":
                    later.setdefault(index + DUPLICATE_AFTER, []).append(
                        replace(first, kind="duplicate"))
                elif kind == "same_fact_new_id":
                    later.setdefault(index + 1, []).append(self._renamed(first, "same_fact_new_id"))
            rounds.append(publishes)
        rounds += [list(later[index]) for index in sorted(later)]
        return rounds

    def start(self) -> None:
        rounds = self.plan()
        self._thread = threading.Thread(target=self._run, args=(rounds,), name=f"producer-{self.spec.name}",
                                        daemon=True)
        self._thread.start()

    def _run(self, rounds: list[list[Planned | tuple[Planned, Planned]]]) -> None:
        try:
            started = time.monotonic()
            pause = self.spread / max(1, len(rounds))
            for number, publishes in enumerate(rounds):
                if self._stop.is_set():
                    return
                futures: list[Future[PublishAck]] = []
                for publish in publishes:
                    if isinstance(publish, tuple):
                        futures += [self._a.submit(publish[0]), self._b.submit(publish[1])]
                    else:
                        futures.append(self._a.submit(publish))
                for future in futures:
                    future.result()
                wait = started + pause * (number + 1) - time.monotonic()
                if wait > 0:
                    self._stop.wait(wait)
        except BaseException as error:  # noqa: BLE001 - reported by stop(): the probe fails with it
            self.error = error

    def wait(self, timeout: float) -> bool:
        """True once every round was published (or the producer failed) within `timeout`."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self._thread is None or not self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._a.close()
        self._b.close()
