"""Fault plans: timed and random fault windows, checked when read, and their schedule.

A plan (YAML; the format in full: docs/nemesis.md) has a seed, explicit windows and
optionally a seeded random nemesis:

    seed: 7
    windows:
      - {at: 2s, for: 3s, toxic: {proxy: app, type: latency, stream: downstream,
                                  attributes: {latency: 800}, toxicity: 1.0}}
      - {at: 5s, for: 2s, process: {action: pause, service: consumer-1}}
      - {at: 4s, for: 2s, proxy_down: redis}
      - {at: 2s, for: 6s, crash_point: consumer.after_effect, action: crash, probability: 0.3}
      - {at: 3s, for: 2s, clock: {target: app, jump: 2h}}       # or skew: -90s, strobe: {...}
    random: {seed: 11, start: 1s, every: 3s, duration: 1s-3s, faults: [...]}
    promises: [recovery_point, reclaim]
    explore: {steps: every, actions: [before, after], learn: 2s, budget: 30s, each: 1}

`explore:` crashes the steps the wire shows (harness.nemesis.explorer): `steps` is
`every` or a list of step identities (`*` a wildcard), `actions` some of before,
after, pause, error, `learn` and `budget` durations, `each` the crashes per step
and action, `wait` how long one armed crash may wait for its step, `settle` the
time given to the clients' retries after each recovery. Only `harness probe`
explores (for now): a stack's run refuses the key (`PlanTargets.explore`).

`promises` names the protective paths (harness.catalog.PATHS) the plan's faults
provoke: a run under the plan that exercised one of them zero times is
inconclusive, because it did not test what the plan claims to test.

`load_plan(path, targets=STACK_TARGETS)` reads and checks a plan; `parse_plan(raw,
source=..., targets=...)` checks one already parsed. Every problem is a one-line
`PlanError` naming the file and the field, and that includes a target the stack does
not have: each proxy and service a plan names is checked against `targets`
(`PlanTargets`), by default the proxies and services every stack has (`STACK_TARGETS`:
proxies app and redis; services app, redis, toxiproxy and consumer-N; clocks app
and consumer-N, never redis: STACK_CLOCKS) and the app's crash points (harness.catalog.CRASH_POINTS), so a
typo fails before any stack starts. A `clock:` window is a `ClockFault`
(harness.nemesis.clock_faults; docs/clocks.md).
A crash point's arming (`action`, `probability`, `count`, `delay_ms`) sits beside its
name in the window and is checked with `check_arming`. `check_targets(plan, PlanTargets.of_stack(info))` checks a
loaded plan again against one running stack (its exact consumers).

`schedule(plan, duration)` turns it into concrete windows (same seed -> same
schedule). The fault types are in harness.nemesis.faults and the runner that
applies a schedule in harness.nemesis.runner; their names are importable from here
too (`NemesisRunner`, `FaultWindow`, `ToxicFault`, ...).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.catalog import CRASH_POINTS, PATHS
from harness.documents import load_yaml
from harness.errors import HarnessError
from harness.fieldcheck import FieldChecker
from harness.nemesis.clock_faults import CLOCK_MODES, MIN_STROBE_EVERY, ClockFault
from harness.nemesis.crash_points import check_arming
from harness.nemesis.explorer import EXPLORE_ACTIONS, ExploreSpec
from harness.nemesis.faults import (
    FAULT_ACTIONS,
    KILL_CHILD,
    CrashPointFault,
    Fault,
    FaultTargets,
    FaultWindow,
    KillChildFault,
    NetworkFaults,
    ProcessAction,
    ProcessFault,
    ProcessFaults,
    ProxyDownFault,
    TargetType,
    ToxicFault,
)
from harness.nemesis.runner import FaultFailure, NemesisFailed, NemesisReport, NemesisRunner
from harness.nemesis.toxiproxy_client import NemesisInvalid, validate_toxic

__all__ = [
    "AgedRetries", "FAULT_ACTIONS", "MIN_RANDOM_EVERY", "STACK_PROXIES", "STACK_TARGETS", "ClockFault", "CrashPointFault", "Fault", "FaultFailure",
    "FaultTargets", "FaultWindow", "NemesisFailed", "NemesisReport", "NemesisRunner", "NetworkFaults", "Plan",
    "PlanError", "PlanTargets", "KillChildFault", "ProcessAction", "ProcessFault", "ProcessFaults", "ProxyDownFault",
    "RandomNemesis", "STACK_CLOCKS", "ToxicFault", "check_targets", "clock_targets", "load_plan", "parse_plan", "schedule",
]

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_CONSUMER = re.compile(r"^consumer-[1-9][0-9]*$")
MIN_RANDOM_EVERY = 0.1
# The plain names of a stack's proxies (a shared Toxiproxy prefixes the real ones).
STACK_PROXIES = ("app", "redis")
_FAULT_KEYS = (ToxicFault.kind, ProcessFault.kind, ProxyDownFault.kind, CrashPointFault.kind, ClockFault.kind)
# What a crash point is armed with sits beside its name: {crash_point: NAME, action: crash, ...}.
_ARMING_KEYS = ("action", "probability", "count", "delay_ms")


class PlanError(HarnessError):
    """A fault plan that cannot be used; the message names the file and the field."""


# --- the plan ---------------------------------------------------------------------

@dataclass(frozen=True)
class PlanTargets:
    """The proxies and services a plan may name.

    `any_consumer` also admits `consumer-N` for every N >= 1: a plan is read before
    the stack starts, when its number of consumers is not known yet.
    """

    proxies: tuple[str, ...]
    services: tuple[str, ...]
    any_consumer: bool = False
    crash_points: tuple[str, ...] = tuple(CRASH_POINTS)  # the target app's (harness.catalog)
    clocks: tuple[str, ...] = ()  # processes a clock fault may move (consumer-N too with any_consumer)
    aged_retries: bool = False  # may the plan have `aged_retries:` (a probe's)
    explore: bool = False  # may the plan have `explore:` (a probe's, for now)

    @classmethod
    def of_stack(cls, proxies: Iterable[str], services: Iterable[str]) -> PlanTargets:
        """Exactly the proxies (plain names) and services of one stack (and the app's
        crash points; the clocks of its app, Redis and consumers)."""
        services = tuple(services)
        return cls(proxies=tuple(proxies), services=services,
                   clocks=tuple(name for name in services if name in STACK_CLOCKS or _CONSUMER.match(name)))

    def knows(self, target_type: TargetType, name: str) -> bool:
        if target_type == "proxy":
            return name in self.proxies
        if target_type == "crash_point":
            return name in self.crash_points
        if target_type == "clock":
            return name in self.clocks or (self.any_consumer and bool(_CONSUMER.match(name)))
        return name in self.services or (self.any_consumer and bool(_CONSUMER.match(name)))

    def known(self, target_type: TargetType) -> str:
        """The known names, for a message."""
        if target_type == "proxy":
            return ", ".join(self.proxies) or "none"
        if target_type == "crash_point":
            return ", ".join(self.crash_points) or "none"
        names = [*(self.clocks if target_type == "clock" else self.services),
                 *(["consumer-N"] if self.any_consumer else [])]
        return ", ".join(names) or "none"


# The stack's processes that run on a fake clock (harness.nemesis.clock_faults), with
# consumer-N. Not the Toxiproxy (a fault on it would test the harness, not the app), and
# not Redis: Debian's redis-server links jemalloc, beside which libfaketime 0.9.10
# cannot initialise (measured: "Cannot recover from unexpected recursive calls to
# clock_gettime()", and Redis never answers; upstream wolfcw/libfaketime#130, open).
STACK_CLOCKS = ("app",)
NO_FAKE_CLOCK = {"redis": "the stack's Redis cannot run under libfaketime: Debian's redis-server links jemalloc, "
                          "which libfaketime 0.9.10 cannot initialise beside (wolfcw/libfaketime#130); move the "
                          "app's or a consumer's clock (docs/clocks.md)"}
STACK_TARGETS = PlanTargets(proxies=STACK_PROXIES, services=("app", "redis", "toxiproxy"), any_consumer=True,
                            clocks=STACK_CLOCKS)


@dataclass(frozen=True)
class RandomNemesis:
    seed: int
    every: float
    duration_min: float
    duration_max: float
    faults: tuple[Fault, ...]
    start: float = 0.0


@dataclass(frozen=True)
class AgedRetries:
    """`aged_retries: {within: [50%, 99%], past: [101%]}`: after the load, the probed
    service's clock is moved to each fraction of an endpoint's key lifetime and the keys
    that already succeeded are sent again (harness.probe.aged_retries): judged within
    the lifetime, reported past it."""

    within: tuple[float, ...]
    past: tuple[float, ...] = ()


@dataclass(frozen=True)
class Plan:
    seed: int
    windows: tuple[FaultWindow, ...] = ()
    random: RandomNemesis | None = None
    source: str = "<plan>"
    promises: tuple[str, ...] = ()
    aged_retries: AgedRetries | None = None
    explore: ExploreSpec | None = None


# --- parsing ----------------------------------------------------------------------

def load_plan(path: Path, targets: PlanTargets = STACK_TARGETS) -> Plan:
    """Read and check a plan file; PlanError names the file and the bad field."""
    path = Path(path)
    raw = load_yaml(path, error=PlanError, what="the plan")
    return parse_plan(raw, source=str(path), targets=targets)


def parse_plan(raw: Any, *, source: str = "<plan>", targets: PlanTargets = STACK_TARGETS) -> Plan:
    """Check a plan already parsed from YAML; `source` names it in messages."""
    where = _Where(source)
    top = where.mapping(raw, "plan", required=("seed",),
                        optional=("windows", "random", "promises", "aged_retries", "explore"))
    seed = where.integer(top["seed"], "seed")
    windows_raw = top.get("windows") or []
    if not isinstance(windows_raw, list):
        raise where.error("windows", "must be a list of windows")
    windows = tuple(_parse_window(where, item, f"windows[{i}]", i) for i, item in enumerate(windows_raw))
    random_nemesis = _parse_random(where, top["random"], seed) if top.get("random") is not None else None
    aged = _parse_aged(where, top["aged_retries"]) if top.get("aged_retries") is not None else None
    explore = _parse_explore(where, top["explore"]) if top.get("explore") is not None else None
    if not windows and random_nemesis is None and aged is None and explore is None:
        raise where.error("plan", "has neither windows nor random: nothing to do")
    plan = Plan(seed=seed, windows=windows, random=random_nemesis, source=source,
                promises=_parse_promises(where, top.get("promises")), aged_retries=aged, explore=explore)
    check_targets(plan, targets)
    return plan


def check_targets(plan: Plan, targets: PlanTargets) -> None:
    """PlanError naming the file, the field and the known names for the first proxy
    or service of `plan` that `targets` does not have."""
    where = _Where(plan.source)
    if plan.aged_retries is not None and not targets.aged_retries:
        raise where.error("aged_retries", "only `harness probe` re-sends aged keys (its service's clock is moved); "
                          "not a stack's run")
    if plan.explore is not None and not targets.explore:
        raise where.error("explore", "only `harness probe` explores the steps of a service it runs (with "
                          "`service:` and `dependencies:` in its config); not a stack's run, yet")
    located: list[tuple[str, Fault]] = [(f"windows[{i}]", window.fault) for i, window in enumerate(plan.windows)]
    if plan.random is not None:
        located += [(f"random.faults[{i}]", fault) for i, fault in enumerate(plan.random.faults)]
    for path, fault in located:
        if not targets.knows(fault.target_type, fault.target):
            if fault.target_type == "clock" and fault.target in NO_FAKE_CLOCK:
                raise where.error(f"{path}.{fault.target_field}", NO_FAKE_CLOCK[fault.target])
            raise where.error(f"{path}.{fault.target_field}",
                              f"unknown {fault.target_type.replace('_', ' ')} {fault.target!r} "
                              f"(known: {targets.known(fault.target_type)})")


def clock_targets(plan: Plan | None) -> tuple[str, ...]:
    """The processes a plan's clock faults move, in the plan's order: those must be
    started under the fake clock (harness.nemesis.fake_clock)."""
    if plan is None:
        return ()
    faults = [window.fault for window in plan.windows]
    if plan.random is not None:
        faults.extend(plan.random.faults)
    targets = [fault.target for fault in faults if isinstance(fault, ClockFault)]
    if plan.aged_retries is not None:
        targets.append("service")  # the probe's service: its clock is moved to age the keys
    return tuple(dict.fromkeys(targets))


def _parse_promises(where: _Where, raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise where.error("promises", "must be a list of path names")
    unknown = [item for item in raw if item not in PATHS]
    if unknown:
        raise where.error("promises", f"unknown path(s) {', '.join(unknown)}; choose from {', '.join(PATHS)}")
    return tuple(dict.fromkeys(raw))


def _parse_window(where: _Where, raw: Any, path: str, index: int) -> FaultWindow:
    item = where.mapping(raw, path, required=("at", "for"), optional=(*_FAULT_KEYS, *_ARMING_KEYS, "name"))
    at = where.duration(item["at"], f"{path}.at")
    length = where.duration(item["for"], f"{path}.for")
    if length <= 0:
        raise where.error(f"{path}.for", "must be longer than 0s")
    fault = _parse_fault(where, item, path)
    name = item.get("name")
    if name is None:
        name = f"w{index}-{fault.label()}"
    elif not isinstance(name, str) or not _NAME.match(name):
        raise where.error(f"{path}.name", "must be lowercase letters, digits, '-' or '_'")
    return FaultWindow(name=name, at=at, duration=length, fault=fault)


def _parse_fault(where: _Where, item: dict[str, Any], path: str) -> Fault:
    given = [key for key in _FAULT_KEYS if key in item]
    if len(given) != 1:
        raise where.error(path, f"needs exactly one of {', '.join(_FAULT_KEYS)}")
    key = given[0]
    extra = [name for name in _ARMING_KEYS if name in item]
    if key == CrashPointFault.kind:
        return _parse_crash_point(where, item, path)
    if extra:
        raise where.error(path, f"{', '.join(extra)} only go(es) with crash_point")
    if key == ClockFault.kind:
        return _parse_clock(where, item[key], f"{path}.clock")
    if key == ProxyDownFault.kind:
        return ProxyDownFault(proxy=where.name(item[key], f"{path}.proxy_down"))
    if key == ProcessFault.kind:
        spec = where.mapping(item[key], f"{path}.process", required=("action", "service"))
        action = spec["action"]
        if action == KILL_CHILD:
            return KillChildFault(service=where.name(spec["service"], f"{path}.process.service"))
        if action not in FAULT_ACTIONS:
            raise where.error(f"{path}.process.action",
                              f"must be one of {', '.join((*FAULT_ACTIONS, KILL_CHILD))}, not {action!r}")
        return ProcessFault(action=ProcessAction(action),
                            service=where.name(spec["service"], f"{path}.process.service"))
    spec = where.mapping(item[key], f"{path}.toxic", required=("proxy", "type"),
                         optional=("stream", "attributes", "toxicity"))
    attributes = spec.get("attributes") or {}
    if not isinstance(attributes, dict):
        raise where.error(f"{path}.toxic.attributes", "must be a mapping of name: integer")
    toxicity = spec.get("toxicity", 1.0)
    try:
        stream, checked = validate_toxic(spec["type"], spec.get("stream", "downstream"), attributes, toxicity)
    except NemesisInvalid as error:
        raise where.error(f"{path}.toxic", str(error)) from None
    return ToxicFault(proxy=where.name(spec["proxy"], f"{path}.toxic.proxy"), type=spec["type"],
                      stream=stream, attributes=checked, toxicity=float(toxicity))


def _parse_crash_point(where: _Where, item: dict[str, Any], path: str) -> CrashPointFault:
    """`{crash_point: NAME, action: A, probability: P, count: N, delay_ms: MS}` (the
    point's name is checked against the targets with the others, check_targets)."""
    name = item[CrashPointFault.kind]
    if not isinstance(name, str) or not name:
        raise where.error(f"{path}.crash_point", f"must be a crash point's name, not {name!r}")
    if "action" not in item:
        raise where.error(path, "a crash_point needs an action")
    try:
        arming = check_arming(item["action"], item.get("probability", 1.0), item.get("count"),
                              item.get("delay_ms"))
    except NemesisInvalid as error:
        raise where.error(path, str(error)) from None
    return CrashPointFault(point=name, arming=arming)


def _parse_clock(where: _Where, raw: Any, path: str) -> ClockFault:
    """`{target: NAME, jump: 2h}`, `{target: NAME, skew: -90s}` or `{target: NAME,
    strobe: {delta: 30s, every: 1s}}` (harness.nemesis.clock_faults)."""
    spec = where.mapping(raw, path, required=("target",), optional=CLOCK_MODES)
    modes = [mode for mode in CLOCK_MODES if mode in spec]
    if len(modes) != 1:
        raise where.error(path, f"needs exactly one of {', '.join(CLOCK_MODES)}")
    mode = modes[0]
    target = where.name(spec["target"], f"{path}.target")
    if mode == "strobe":
        strobe = where.mapping(spec[mode], f"{path}.strobe", required=("delta", "every"))
        delta = where.signed_duration(strobe["delta"], f"{path}.strobe.delta")
        every = where.duration(strobe["every"], f"{path}.strobe.every")
        if every < MIN_STROBE_EVERY:
            raise where.error(f"{path}.strobe.every", f"must be at least {MIN_STROBE_EVERY:g}s")
        if delta == 0:
            raise where.error(f"{path}.strobe.delta", "must not be 0s: the clock would not move")
        return ClockFault(process=target, mode=mode, delta=delta, every=every)
    delta = where.signed_duration(spec[mode], f"{path}.{mode}")
    if delta == 0:
        raise where.error(f"{path}.{mode}", "must not be 0s: the clock would not move")
    return ClockFault(process=target, mode=mode, delta=delta)


_EXPLORE_KEYS = ("steps", "actions", "learn", "budget", "each", "wait", "settle")


def _parse_explore(where: _Where, raw: Any) -> ExploreSpec:
    """`explore: {steps: every, actions: [before, after], learn: 2s, budget: 30s, each: 1}`."""
    spec = where.mapping(raw, "explore", optional=_EXPLORE_KEYS)
    steps_raw = spec.get("steps", "every")
    if steps_raw == "every":
        steps: tuple[str, ...] = ()
    elif isinstance(steps_raw, list) and steps_raw and all(isinstance(s, str) and s.strip() for s in steps_raw):
        steps = tuple(dict.fromkeys(s.strip() for s in steps_raw))
    else:
        raise where.error("explore.steps", f"must be `every` or a list of step identities like "
                          f"'db COMMIT - service', not {steps_raw!r}")
    actions_raw = spec.get("actions", ["before", "after"])
    if not isinstance(actions_raw, list) or not actions_raw:
        raise where.error("explore.actions", f"must be a non-empty list of {', '.join(EXPLORE_ACTIONS)}")
    for i, action in enumerate(actions_raw):
        if action not in EXPLORE_ACTIONS:
            raise where.error(f"explore.actions[{i}]", f"must be one of {', '.join(EXPLORE_ACTIONS)}, not {action!r}")
    durations = {}
    for name, default in (("learn", 2.0), ("budget", 30.0), ("wait", 5.0), ("settle", 1.0)):
        value = where.duration(spec.get(name, default), f"explore.{name}")
        if value <= 0 and name != "settle":
            raise where.error(f"explore.{name}", "must be longer than 0s")
        durations[name] = value
    each = where.integer(spec.get("each", 1), "explore.each", minimum=1, wording="an integer >= 1")
    return ExploreSpec(steps=steps, actions=tuple(dict.fromkeys(actions_raw)), each=each, learn=durations["learn"],
                       budget=durations["budget"], wait=durations["wait"], settle=durations["settle"])


def _parse_aged(where: _Where, raw: Any) -> AgedRetries:
    spec = where.mapping(raw, "aged_retries", required=("within",), optional=("past",))
    within = tuple(_fraction(where, item, f"aged_retries.within[{i}]") for i, item in
                   enumerate(_list(where, spec["within"], "aged_retries.within")))
    past = tuple(_fraction(where, item, f"aged_retries.past[{i}]") for i, item in
                 enumerate(_list(where, spec.get("past") or [], "aged_retries.past")))
    if not within or any(not 0 < value < 1 for value in within):
        raise where.error("aged_retries.within", "must list fractions of the key lifetime between 0% and 100%")
    if any(value <= 1 for value in past):
        raise where.error("aged_retries.past", "must list fractions past the key lifetime (over 100%)")
    return AgedRetries(within=tuple(sorted(within)), past=tuple(sorted(past)))


def _list(where: _Where, raw: Any, path: str) -> list[Any]:
    if not isinstance(raw, list):
        raise where.error(path, "must be a list like [50%, 99%]")
    return raw


def _fraction(where: _Where, raw: Any, path: str) -> float:
    """`50%` or 0.5."""
    text = raw.strip() if isinstance(raw, str) else raw
    try:
        value = float(text[:-1]) / 100 if isinstance(text, str) and text.endswith("%") else float(text)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int past a float's range
        raise where.error(path, f"must be a percentage like 50% or a fraction like 0.5, not {raw!r}") from None
    if isinstance(raw, bool) or not value > 0 or value != value or value == float("inf"):
        raise where.error(path, f"must be a positive percentage, not {raw!r}")
    return value


def _parse_random(where: _Where, raw: Any, plan_seed: int) -> RandomNemesis:
    spec = where.mapping(raw, "random", required=("every", "duration", "faults"), optional=("seed", "start"))
    every = where.duration(spec["every"], "random.every")
    if every < MIN_RANDOM_EVERY:
        raise where.error("random.every", f"must be at least {MIN_RANDOM_EVERY}s")
    low, high = where.duration_range(spec["duration"], "random.duration")
    if low <= 0 or high > every:
        raise where.error("random.duration", f"must be > 0s and at most random.every ({every:g}s), so windows never overlap")
    faults_raw = spec["faults"]
    if not isinstance(faults_raw, list) or not faults_raw:
        raise where.error("random.faults", "must be a non-empty list of faults")
    faults: list[Fault] = []
    for i, item in enumerate(faults_raw):
        path = f"random.faults[{i}]"
        where.mapping(item, path, optional=(*_FAULT_KEYS, *_ARMING_KEYS))
        faults.append(_parse_fault(where, item, path))
    seed = where.integer(spec["seed"], "random.seed") if "seed" in spec else plan_seed
    start = where.duration(spec["start"], "random.start") if "start" in spec else 0.0
    return RandomNemesis(seed=seed, every=every, duration_min=low, duration_max=high,
                         faults=tuple(faults), start=start)


class _Where(FieldChecker):
    """Field checks that raise PlanError with the file and the field's path."""

    def __init__(self, source: str) -> None:
        super().__init__(source, PlanError)

    def integer(self, raw: Any, path: str, *, minimum: int = 0, wording: str | None = None) -> int:
        # A plan's integers (seeds) are never bounded above zero; its messages have
        # always said "non-negative", which the plan tests and users' scripts match.
        return super().integer(raw, path, minimum=minimum, wording=wording or "a non-negative integer")

    def signed_duration(self, raw: Any, path: str) -> float:
        """A duration that may be negative: `-2h` moves a clock back."""
        if isinstance(raw, str) and raw.strip().startswith(("-", "+")):
            text = raw.strip()
            return (-1.0 if text[0] == "-" else 1.0) * self.duration(text[1:], path)
        if isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw < 0:
            return -self.duration(-raw, path)
        return self.duration(raw, path)

    def duration_range(self, raw: Any, path: str) -> tuple[float, float]:
        if isinstance(raw, str) and "-" in raw.strip().lstrip("-"):
            low_text, _, high_text = raw.strip().partition("-")
            low, high = self.duration(low_text, path), self.duration(high_text, path)
        else:
            low = high = self.duration(raw, path)
        if low > high:
            raise self.error(path, f"range {raw!r} runs backwards")
        return low, high

    def name(self, raw: Any, path: str) -> str:
        if not isinstance(raw, str) or not _NAME.match(raw):
            raise self.error(path, f"must be a name like consumer-1 or redis, not {raw!r}")
        return raw


# --- the schedule -------------------------------------------------------------------

def schedule(plan: Plan, duration: float, *, run_seed: int | None = None) -> list[FaultWindow]:
    """The windows of a run of `duration` seconds, sorted by start; deterministic.

    `run_seed` (the run's `--seed`) is mixed into the random nemesis's own seed, so
    runs with different seeds meet different random faults while one (plan, seed)
    pair always gives the same schedule; the explicit windows never move.
    Windows that start at or after the end are dropped; one that would outlast the
    run is cut at its end, where `NemesisRunner.start(..., hold_from=duration)` keeps
    it on until the load has stopped (its users' last retries still meet the fault).
    """
    windows = [w for w in plan.windows]
    if plan.random is not None:
        windows.extend(_random_windows(plan.random, duration, run_seed))
    result = []
    for window in windows:
        if window.at >= duration:
            continue
        length = min(window.duration, duration - window.at)
        result.append(FaultWindow(window.name, window.at, round(length, 3), window.fault))
    return sorted(result, key=lambda w: (w.at, w.name))


def _random_windows(spec: RandomNemesis, duration: float, run_seed: int | None) -> list[FaultWindow]:
    rng = random.Random(spec.seed if run_seed is None else f"{spec.seed}:{run_seed}")
    windows = []
    at = spec.start
    index = 0
    # Bounded: `every` is at least MIN_RANDOM_EVERY, so this runs duration/every times.
    while at < duration:
        fault = rng.choice(spec.faults)
        length = round(rng.uniform(spec.duration_min, spec.duration_max), 3)
        windows.append(FaultWindow(f"r{index}-{fault.label()}", round(at, 3), length, fault))
        index += 1
        at += spec.every
    return windows

