"""Crash at every step: the explorer's schedule, its crashes and its coverage table.

Contract (independent of the probe and of the proxy: it talks to a `StepSource`):
- `StepSource` lists the steps seen on the wire (identity -> count, e.g.
  `db COMMIT - service`, harness.toxiproxy.steps), arms a one-shot trigger
  (`before`, `after`, `pause`, `error`) at the next occurrence of a step, reads
  what an armed trigger did (its `fired` record: step, pid, at_us, verified, error)
  and disarms one that has not matched yet.
- `explore(source, spec, seed, recover)` learns for `spec.learn` seconds (the
  distinct steps the load makes), then crashes each chosen step with each action
  of `spec.actions`, `spec.each` times, in an order fixed by `seed` (the same seed
  gives the same sequence of crash states). One crash at a time: armed, waited
  for at most `spec.wait` seconds (a crash not met is disarmed, one that fired
  unverified recovered, and either tried once more at the end), then `recover(record)` (the caller restarts what was killed
  and returns once it serves again), then `spec.settle` seconds for the clients'
  retries. The whole is bounded by `spec.budget` seconds after learning and by
  the schedule's length; `stop` ends it early (the load is over).
- Steps seen only while `recover` ran (a restarted service's start-up queries)
  are *start-up steps*: listed, never crashed, and no reason for an inconclusive
  run (a crash there would stop the service from starting, not test a request).
- `Exploration.table()` is the `CoverageTable`: every step found, how often it was
  crashed before/after (verified crashes only), which invariants failed after a
  crash there (`attribute`), and `Exploration.reasons()` names each step and
  action that was promised (every step, or `spec.steps`) and never crashed.
- `attribute(exploration, violations, operations, grace)`: a violation is put on a
  crash when one of the idempotency keys in its evidence had a request in flight
  when the crash fired: invoked at or before the crash and completed at or after
  it (an indeterminate completion, a client timeout, counts `grace` seconds
  longer: the server may still have been working on it).
Errors (`ExploreError`, a HarnessError, exit 2): a step of `spec.steps` that no
process sends, a crash whose process could not be found or signalled.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.errors import HarnessError

EXPLORE_ACTIONS = ("before", "after", "pause", "error")
KILLING_ACTIONS = ("before", "after")  # the ones that kill the step's sender
POLL = 0.02  # how often an armed trigger is looked at


class ExploreError(HarnessError):
    """The exploration cannot do what its plan asked (exit 2)."""


@dataclass(frozen=True)
class ExploreSpec:
    """A plan's `explore:`: which steps (empty: every one), which actions, how long
    to learn, the budget after learning, crashes per step and action, how long one
    armed crash may wait for its step, how long the retries get after a recovery."""

    steps: tuple[str, ...] = ()
    actions: tuple[str, ...] = KILLING_ACTIONS
    learn: float = 2.0
    budget: float = 30.0
    each: int = 1
    wait: float = 5.0
    settle: float = 1.0
    pause_ms: int = 500  # a `pause` action's SIGSTOP

    @property
    def every(self) -> bool:
        return not self.steps


class StepSource(Protocol):
    """Where steps are seen and triggers armed (one or more proxies)."""

    def steps(self) -> Mapping[str, int]: ...

    def arm(self, action: str, step: str) -> object: ...

    def fired(self, armed: object) -> Mapping[str, Any] | None: ...

    def disarm(self, armed: object) -> bool:
        """True: taken back; False: it matched its step already (it fires)."""
        ...


@dataclass
class CrashRecord:
    """One scheduled crash and what became of it."""

    index: int
    step: str
    action: str
    armed_at: float
    outcome: str = "armed"  # crashed | not-met | unverified | out-of-time
    fired_at: float | None = None
    recovered_at: float | None = None
    pid: int | None = None
    error: str | None = None

    @property
    def name(self) -> str:
        return f"explore-{self.index}-{self.action}"

    def fault_line(self) -> dict[str, Any]:
        """Its line of faults.jsonl (the fields of harness.nemesis.faults.FaultRecord)."""
        return {"name": self.name, "kind": "step", "target": self.step, "type": None, "stream": None,
                "attributes": None, "toxicity": None, "action": self.action, "outcome": self.outcome,
                "pid": self.pid, "start": self.fired_at if self.fired_at is not None else self.armed_at,
                "end": self.recovered_at if self.recovered_at is not None else self.fired_at or self.armed_at,
                "error": self.error}


@dataclass
class CoverageRow:
    step: str
    learned: bool
    startup: bool
    crashed: dict[str, int]
    attempts: int
    failed: dict[str, int] = field(default_factory=dict)  # invariant -> violations put on a crash here

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "learned": self.learned, "startup": self.startup, "crashed": dict(self.crashed),
                "attempts": self.attempts, "failed": dict(sorted(self.failed.items()))}


@dataclass
class Exploration:
    """What one exploration learned and did."""

    spec: ExploreSpec
    seed: int
    learned: tuple[str, ...] = ()
    seen: tuple[str, ...] = ()
    startup: tuple[str, ...] = ()
    crashes: list[CrashRecord] = field(default_factory=list)
    stopped_early: bool = False
    failed: dict[str, dict[str, int]] = field(default_factory=dict)  # step -> invariant -> count

    def promised(self) -> list[str]:
        """The steps that must be crashed: every one seen (start-up steps aside), or
        those of `spec.steps` the learning found."""
        if self.spec.every:
            return [step for step in self.seen if step not in self.startup]
        return [step for step in self.learned if any(_matches(pattern, step) for pattern in self.spec.steps)]

    def table(self) -> list[CoverageRow]:
        rows = []
        for step in sorted(set(self.seen) | set(self.learned)):
            crashed = {action: sum(1 for crash in self.crashes if crash.step == step and crash.action == action
                                   and crash.outcome == "crashed") for action in self.spec.actions}
            rows.append(CoverageRow(step=step, learned=step in self.learned, startup=step in self.startup,
                                    crashed=crashed, attempts=sum(1 for crash in self.crashes if crash.step == step),
                                    failed=dict(self.failed.get(step, {}))))
        return rows

    def reasons(self) -> list[str]:
        """Why the run did not test what the plan promised (an inconclusive verdict)."""
        if not self.learned:
            return [f"explore: no step was seen on the dependencies in the {self.spec.learn:g}s of learning"]
        reasons = []
        rows = {row.step: row for row in self.table()}
        for step in self.promised():
            missing = [action for action in self.spec.actions if rows[step].crashed.get(action, 0) < 1]
            if missing:
                why = "first seen after the learning" if step not in self.learned else (
                    f"armed {rows[step].attempts} times, never met or verified" if rows[step].attempts
                    else "the budget ran out before it")
                reasons.append(f"explore: step {step!r} was never crashed {' or '.join(missing)} ({why})")
        return reasons

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "every": self.spec.every, "steps": list(self.spec.steps),
                "actions": list(self.spec.actions), "learned": list(self.learned),
                "startup": list(self.startup), "stopped_early": self.stopped_early,
                "coverage": [row.to_dict() for row in self.table()],
                "crashes": [crash.fault_line() for crash in self.crashes], "reasons": self.reasons()}


def _matches(pattern: str, step: str) -> bool:
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == step
    if not (step.startswith(parts[0]) and step.endswith(parts[-1])):
        return False
    at = len(parts[0])
    for part in parts[1:-1]:
        found = step.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return at <= len(step) - len(parts[-1])


def crash_order(steps: Sequence[str], spec: ExploreSpec, seed: int) -> list[tuple[str, str]]:
    """The crash schedule: every (step, action), `spec.each` rounds, each round in
    an order drawn from `seed` (sorted first, so the source's order never matters)."""
    rng = random.Random(f"explore:{seed}")
    pairs = [(step, action) for step in sorted(steps) for action in spec.actions]
    order: list[tuple[str, str]] = []
    for _ in range(spec.each):
        batch = list(pairs)
        rng.shuffle(batch)
        order.extend(batch)
    return order


def chosen_steps(learned: Iterable[str], spec: ExploreSpec) -> list[str]:
    """The learned steps `spec` asks to crash; ExploreError for a pattern none matches."""
    learned = sorted(learned)
    if spec.every:
        return learned
    for index, pattern in enumerate(spec.steps):
        if not any(_matches(pattern, step) for step in learned):
            raise ExploreError(f"explore.steps[{index}]: no process sends step {pattern!r} "
                               f"(steps seen while learning: {', '.join(learned) or 'none'})")
    return [step for step in learned if any(_matches(pattern, step) for pattern in spec.steps)]


def explore(source: StepSource, spec: ExploreSpec, seed: int, recover: Callable[[CrashRecord], None], *,
            stop: threading.Event | None = None, clock: Callable[[], float] = time.monotonic,
            wall: Callable[[], float] = time.time) -> Exploration:
    """Learn, then crash each chosen step by the seeded schedule (see the module's contract)."""
    stop = stop or threading.Event()
    result = Exploration(spec=spec, seed=seed)
    if stop.wait(spec.learn):
        result.stopped_early = True
    result.learned = tuple(sorted(source.steps()))
    if result.stopped_early:
        result.seen = result.learned
        return result
    queue = [(step, action, 0) for step, action in crash_order(chosen_steps(result.learned, spec), spec, seed)]
    deadline = clock() + spec.budget
    during_recovery: dict[str, int] = {}
    before_recovery_total: dict[str, int] = dict(source.steps())
    outside: set[str] = set(result.learned)  # steps seen while no recovery ran
    index = 0
    while queue:
        if stop.is_set() or clock() >= deadline:
            result.stopped_early = stop.is_set() or bool(queue)
            break
        step, action, tries = queue.pop(0)
        record = CrashRecord(index=index, step=step, action=action, armed_at=wall())
        index += 1
        result.crashes.append(record)
        armed = source.arm(action, step)
        fired = _wait_fired(source, armed, min(spec.wait, max(0.0, deadline - clock())), stop)
        if fired is None and not source.disarm(armed):
            fired = _wait_fired(source, armed, spec.wait, stop)  # it matched: its reply is on the way
        if fired is None:
            record.outcome = "not-met" if not stop.is_set() else "out-of-time"
            record.recovered_at = wall()
            if tries == 0:
                queue.append((step, action, 1))
            continue
        at_us = fired.get("at_us")
        record.fired_at = at_us / 1e6 if isinstance(at_us, int) else float(fired.get("at") or wall())
        record.pid = fired.get("pid") if isinstance(fired.get("pid"), int) else None
        record.error = fired.get("error") if isinstance(fired.get("error"), str) else None
        record.outcome = "crashed" if fired.get("verified") is not False else "unverified"
        now_steps = dict(source.steps())
        outside.update(name for name, count in now_steps.items() if count > before_recovery_total.get(name, 0))
        recover(record)  # raises ExploreError when the crash cannot be mapped to a process
        record.recovered_at = wall()
        if record.outcome == "unverified" and tries == 0:
            queue.append((step, action, 1))  # it fired but did not take: once more at the end
        after = dict(source.steps())
        for name, count in after.items():
            if count > now_steps.get(name, 0):
                during_recovery[name] = during_recovery.get(name, 0) + count - now_steps.get(name, 0)
        before_recovery_total = after
        if stop.wait(spec.settle):
            result.stopped_early = bool(queue)
            break
    final = dict(source.steps())
    outside.update(name for name, count in final.items() if count > before_recovery_total.get(name, 0))
    result.seen = tuple(sorted(final))
    result.startup = tuple(sorted(name for name in during_recovery if name not in outside))
    return result


def _wait_fired(source: StepSource, armed: object, timeout: float,
                stop: threading.Event) -> Mapping[str, Any] | None:
    end = time.monotonic() + timeout
    while True:
        fired = source.fired(armed)
        if fired is not None:
            return fired
        if time.monotonic() >= end or stop.wait(POLL):
            return source.fired(armed)


def violation_keys(violation: Mapping[str, Any]) -> set[str]:
    """Every idempotency key named in a violation's evidence (`key`, `idempotency_key`)."""
    keys: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for name, item in value.items():
                if name in ("key", "idempotency_key") and isinstance(item, str):
                    keys.add(item)
                else:
                    walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)

    walk(violation.get("evidence"))
    return keys


def in_flight(operations: Iterable[Mapping[str, Any]], at: float, grace: float) -> set[str]:
    """The keys whose requests were in flight at `at` (unix seconds)."""
    keys = set()
    for op in operations:
        key, invoked, completed = op.get("idempotency_key"), op.get("invoke_time"), op.get("complete_time")
        if not isinstance(key, str) or not isinstance(invoked, (int, float)):
            continue
        end = completed if isinstance(completed, (int, float)) else float("inf")
        if op.get("type") == "info":
            end += grace
        if invoked <= at <= end:
            keys.add(key)
    return keys


def attribute(exploration: Exploration, violations: Iterable[Mapping[str, Any]],
              operations: Sequence[Mapping[str, Any]], *, grace: float) -> list[dict[str, Any]]:
    """Put each violation on the crashes it follows (the module's rule); fills
    `exploration.failed` and returns, per violation, the crashes it was put on."""
    fired = [crash for crash in exploration.crashes if crash.fired_at is not None]
    flights = {crash.index: in_flight(operations, crash.fired_at or 0.0, grace) for crash in fired}
    placed = []
    for violation in violations:
        keys = violation_keys(violation)
        crashes = [crash for crash in fired if keys & flights[crash.index]]
        for crash in crashes:
            counts = exploration.failed.setdefault(crash.step, {})
            invariant = str(violation.get("invariant"))
            counts[invariant] = counts.get(invariant, 0) + 1
        placed.append({"invariant": violation.get("invariant"),
                       "crashes": [{"name": crash.name, "step": crash.step, "action": crash.action}
                                   for crash in crashes]})
    return placed
