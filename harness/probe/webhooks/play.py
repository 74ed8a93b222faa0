"""One probe run's webhook deliveries, from the first delivery to the counted effects.

`WebhookPlay(entries, run_dir, seed=..., duration=...)`, for the config's `webhooks:`:

1. `start(base_url)`: for each entry, a dispatcher thread releases `rounds` rounds
   over the first `SPREAD_SHARE` of the load to a pool of `WORKERS` threads, so
   rounds overlap. A round plays one kind of delivery end to end
   (`harness.webhooks.sender.WebhookProvider.play`): `first`, `concurrent_copy`,
   `same_object_new_event`, `out_of_order` (with a `sequence`), `late_duplicate`, and
   every refusal the scheme can express; every kind comes once before any comes twice,
   then they are drawn by weight. A delivery not answered 2xx is retried with the same
   event id and a fresh timestamp and signature on `SCHEDULE` (the hours of a real
   provider compressed), each try waiting the entry's `timeout`. Every delivery goes to
   `<base_url><path>`, the probe's proxy `app`, so a plan slows, cuts and resets the
   receiver's answers;
2. every try is one operation of the probe's history (`op: webhook`, `webhook` the
   entry's name, `kind`, `event_id`, `event_type`, `fact`, `must_refuse`, `attempt`,
   `retry_of`, `order`, `timestamp`): `ok` for a 2xx, `fail` for a 4xx (the receiver
   said no), `info` for anything else (a 5xx, a redirect, no answer: it may or may not
   have taken effect). Files `history/webhooks-<name>-<pid>.jsonl`;
3. `stop()` after the load: no new round starts (those still queued are dropped), the
   running ones finish (each is bounded by its tries, timeouts and waits);
4. `finish(upstream)`, with every fault healed: the provider's late retry (a real
   provider keeps retrying for hours, then days): every delivery chain (a first try and
   its retries, per copy) that never got a 2xx is tried once more (`late: true` in the
   history); then each fact delivered is counted by the entry's oracle (`fact`).
   One `WebhookOutcome` per entry, written to `webhooks.jsonl`;
   harness.probe.webhooks.checks judges them.

The order of the kinds depends on the seed alone; ids and generated values on the seed
and the run's nonce (a run probing the database of an earlier one must not find its
event ids already taken). Bounded in count (`MAX_ROUNDS`, `MAX_LATE_RETRIES`, `MAX_FACTS`) and time (the load's
duration, `LATE_BUDGET`, `EFFECTS_BUDGET`). An oracle that cannot answer is a
HarnessError (exit 2): a run whose effects cannot be counted proves nothing.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from harness.history import SharedHistory, history_files, history_path, iter_operations
from harness.probe.config import WebhookEndpoint
from harness.probe.oracles import open_oracle
from harness.webhooks.deliveries import (
    CONCURRENT_COPY,
    FIRST,
    LATE_DUPLICATE,
    OUT_OF_ORDER,
    REFUSED_KINDS,
    SAME_OBJECT_NEW_EVENT,
    Delivery,
    DeliveryPlanner,
)
from harness.webhooks.events import Event, EventListener, EventMaker
from harness.webhooks.sender import Outcome, RetrySchedule, Sender, WebhookProvider

OUTCOMES_FILE = "webhooks.jsonl"
SCHEDULE = RetrySchedule((0.25, 0.5, 1.0))  # a real provider's minutes to hours, compressed
LATE_AFTER = 1.0  # seconds between a first delivery and its late duplicate
SPREAD_SHARE = 0.6  # rounds start over this share of the load's duration
WORKERS = 4  # rounds in flight at once, per entry
ROUNDS_PER_SECOND = 8.0
MIN_ROUNDS = 16
MAX_ROUNDS = 400
MAX_LATE_RETRIES = 300
LATE_BUDGET = 30.0  # seconds for all late retries together
MAX_FACTS = 800
EFFECTS_BUDGET = 30.0
# How often each kind is drawn once every kind was played (the refusals share theirs).
WEIGHTS: Mapping[str, float] = {FIRST: 0.15, CONCURRENT_COPY: 0.25, SAME_OBJECT_NEW_EVENT: 0.15,
                                OUT_OF_ORDER: 0.15, LATE_DUPLICATE: 0.1}
REFUSALS_WEIGHT = 0.2


@dataclass
class WebhookOutcome:
    """What the end of the run found for one `webhooks:` entry."""

    name: str
    counted: bool  # the entry has an oracle (`effects:`)
    effects: list[tuple[str, int]] = field(default_factory=list)  # (fact, effects) per fact delivered
    rounds: int = 0
    late_retries: int = 0


@dataclass
class _Chain:
    """A first try and its retries (one per copy of an event); acknowledged once one got a 2xx."""

    first: Delivery
    attempts: int = 1
    acknowledged: bool = False


class RecordingSender(Sender):
    """A Sender that records every try in the history and keeps each delivery chain's state."""

    def __init__(self, base_url: str, entry: WebhookEndpoint, recorder: SharedHistory) -> None:
        spec = entry.spec
        super().__init__(base_url, spec.path, timeout=spec.timeout, user_agent=spec.signer().user_agent)
        self.recorder = recorder
        self.name = spec.name
        self.chains: dict[tuple[str, str], _Chain] = {}
        self._lock = threading.Lock()

    def send(self, delivery: Delivery, *, late: bool = False) -> Outcome:
        fields: dict[str, Any] = {name: value for name, value in delivery.summary().items() if value is not None}
        if late:
            fields["late"] = True
        operation = self.recorder.client().invoke("webhook", webhook=self.name, **fields)
        outcome = super().send(delivery)
        answer = {"elapsed": round(outcome.elapsed, 6), "started": outcome.started}
        if outcome.acknowledged:
            operation.ok(status=outcome.status, **answer)
        elif outcome.refused:
            operation.fail(status=outcome.status, answer=outcome.answer[:120], **answer)
        else:
            operation.info(**({"status": outcome.status} if outcome.status is not None else {}),
                           error=outcome.error or f"HTTP {outcome.status}", **answer)
        if not delivery.must_refuse:
            self._track(delivery, outcome.acknowledged)
        return outcome

    def _track(self, delivery: Delivery, acknowledged: bool) -> None:
        key = (delivery.event_id, delivery.retry_of or delivery.kind)
        with self._lock:
            chain = self.chains.get(key)
            if chain is None:
                chain = self.chains[key] = _Chain(first=delivery)
            else:
                chain.attempts = max(chain.attempts, delivery.attempt)
            chain.acknowledged = chain.acknowledged or acknowledged

    def unacknowledged(self) -> list[_Chain]:
        with self._lock:
            return [chain for chain in self.chains.values() if not chain.acknowledged]


def round_kinds(kinds: Sequence[str], rounds: int, rng: random.Random) -> list[str]:
    """`rounds` kinds: each of `kinds` once (shuffled), then drawn by WEIGHTS."""
    first = list(kinds)
    rng.shuffle(first)
    refusals = [kind for kind in kinds if kind in REFUSED_KINDS]
    weights = {kind: WEIGHTS.get(kind, 0.0) for kind in kinds if kind not in REFUSED_KINDS}
    weights.update({kind: REFUSALS_WEIGHT / len(refusals) for kind in refusals})
    names, shares = list(weights), list(weights.values())
    return (first + rng.choices(names, shares, k=max(0, rounds - len(first))))[:max(rounds, len(first))]


class _EntryPlay:
    """One entry's rounds on a dispatcher thread and a pool of workers."""

    def __init__(self, entry: WebhookEndpoint, history_dir: Path, *, seed: int, salt: str, duration: float,
                 on_event: EventListener | None = None) -> None:
        self.entry = entry
        self.on_event = on_event
        self.seed = seed
        self.salt = salt
        self.spread = duration * SPREAD_SHARE
        self.rounds = min(MAX_ROUNDS, max(MIN_ROUNDS, int(duration * ROUNDS_PER_SECOND)))
        # Copies are sent from threads of their own: one file, a Client per thread.
        worker = f"webhooks-{entry.spec.name}"
        self.recorder = SharedHistory(history_path(history_dir, worker=worker), worker=worker, flush_interval=0.5)
        self.sender: RecordingSender | None = None
        self.played = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=f"webhook-{entry.spec.name}")

    def provider(self, index: int) -> WebhookProvider:
        """A provider of its own for round `index`: its ids and values come from a seed of their own,
        salted with the run's nonce, so two runs against one database share no event id and no fact."""
        assert self.sender is not None
        spec = self.entry.spec
        scheme = spec.signer()
        rng = random.Random(f"{self.seed}:{self.salt}:{spec.name}:{index}")
        return WebhookProvider(EventMaker(scheme, spec.event, rng, on_event=self.on_event),
                               DeliveryPlanner(scheme, spec.secret, tolerance=spec.tolerance, rng=rng),
                               self.sender, schedule=SCHEDULE, late_after=LATE_AFTER)

    def start(self, base_url: str) -> None:
        self.sender = RecordingSender(base_url, self.entry, self.recorder)
        kinds = round_kinds(self.provider(-1).kinds(), self.rounds, random.Random(f"{self.seed}:{self.entry.spec.name}"))
        self._thread = threading.Thread(target=self._dispatch, args=(kinds,), name=f"webhooks-{self.entry.spec.name}",
                                        daemon=True)
        self._thread.start()

    def _dispatch(self, kinds: list[str]) -> None:
        started = time.monotonic()
        pause = self.spread / max(1, len(kinds))
        futures: list[Future[list[Outcome]]] = []
        for index, kind in enumerate(kinds):
            if self._stop.is_set():
                break
            try:
                futures.append(self._pool.submit(self._round, index, kind))
            except RuntimeError:
                break  # the pool was shut down by stop() between the check and the submit
            self._stop.wait(max(0.0, started + pause * (index + 1) - time.monotonic()))
        for future in futures:
            try:
                future.result()
            except CancelledError:
                continue  # not started when the load ended (stop)
            except BaseException as error:  # noqa: BLE001 - reported by stop(): the probe fails with it
                self.error = self.error or error

    def _round(self, index: int, kind: str) -> list[Outcome]:
        outcomes = self.provider(index).play(kind)
        self.played += 1
        return outcomes

    def stop(self) -> None:
        """No new round starts; the running ones finish, each bounded by its tries (attempts x
        timeout, the waits, a late duplicate's pause); the rounds not started are dropped."""
        self._stop.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.recorder.flush()

    def late_retries(self, deadline: float) -> int:
        """Every chain without a 2xx, tried once more (freshly signed), until the deadline."""
        sender = self.sender
        if sender is None:
            return 0
        spec = self.entry.spec
        planner = DeliveryPlanner(spec.signer(), spec.secret, tolerance=spec.tolerance,
                                  rng=random.Random(f"{self.seed}:{self.salt}:{spec.name}:late"))
        sent = 0
        for chain in sender.unacknowledged()[:MAX_LATE_RETRIES]:
            if time.monotonic() > deadline:
                break
            first = chain.first
            event = Event(id=first.event_id, type=first.event_type, created=0, body=first.body, fact=first.fact)
            sender.send(planner.retry(first, event, chain.attempts + 1), late=True)
            sent += 1
        self.recorder.flush()
        return sent


class WebhookPlay:
    """The webhook rounds of one run; a context manager (leaving it closes the histories).
    Without entries every step does nothing and `finish` returns None, so the runner calls
    the same steps whatever the config holds."""

    def __init__(self, entries: Sequence[WebhookEndpoint], run_dir: Path, *, seed: int, nonce: str,
                 duration: float, on_event: EventListener | None = None) -> None:
        """`on_event` is told every event made (harness.webhooks.events): the run's payment
        provider adopts their objects (harness.probe.provider.play.ProbeProvider.adopt_event)."""
        self.entries = tuple(entries)
        self.run_dir = Path(run_dir)
        self.plays = [_EntryPlay(entry, self.run_dir / "history", seed=seed, salt=nonce,
                                  duration=duration, on_event=on_event)
                      for entry in self.entries]

    def __enter__(self) -> WebhookPlay:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for play in self.plays:
            play.recorder.close()

    def start(self, base_url: str) -> None:
        for play in self.plays:
            play.start(base_url)

    def stop(self) -> None:
        for play in self.plays:
            play.stop()
        errors = [play.error for play in self.plays if play.error is not None]
        if errors:
            raise errors[0]

    def finish(self, upstream: str, headers: Mapping[str, str] | None = None) -> list[WebhookOutcome] | None:
        """The late retries, then each fact's effects; None without entries."""
        if not self.entries:
            return None
        late_deadline = time.monotonic() + LATE_BUDGET
        late = [play.late_retries(late_deadline) for play in self.plays]
        outcomes = []
        deadline = time.monotonic() + EFFECTS_BUDGET
        for play, retried in zip(self.plays, late, strict=True):
            entry = play.entry
            outcome = WebhookOutcome(name=entry.spec.name, counted=entry.effects is not None, rounds=play.played,
                                     late_retries=retried)
            if entry.effects is not None:
                facts = _facts(entry.spec.name, self.run_dir / "history")
                oracle = open_oracle(entry.spec.name, entry.effects, upstream=upstream)
                try:
                    for fact in facts[:MAX_FACTS]:
                        if time.monotonic() > deadline:
                            break
                        outcome.effects.append((fact, oracle.count({"fact": fact}, dict(headers or {})).count))
                finally:
                    oracle.close()
            outcomes.append(outcome)
        with open(self.run_dir / OUTCOMES_FILE, "wb") as out:
            for outcome in outcomes:
                out.write(orjson.dumps(asdict(outcome)) + b"\n")
        return outcomes


def _facts(name: str, history_dir: Path) -> list[str]:
    """The facts of every delivery of entry `name`, in the order first sent."""
    facts: dict[str, None] = {}
    for op in iter_operations(history_files(history_dir)):
        if op.get("op") == "webhook" and op.get("webhook") == name and isinstance(op.get("fact"), str):
            facts.setdefault(op["fact"], None)
    return list(facts)
