"""Fault plans: timed and random fault windows, their schedule, and the runner.

A plan (YAML) has a seed, explicit windows and optionally a seeded random nemesis:

    seed: 7
    windows:
      - {at: 2s, for: 3s, toxic: {proxy: app, type: latency, stream: downstream,
                                  attributes: {latency: 800}, toxicity: 1.0}}
      - {at: 5s, for: 2s, process: {action: pause, service: consumer-1}}
      - {at: 4s, for: 2s, proxy_down: redis}
    random: {seed: 11, start: 1s, every: 3s, duration: 1s-3s, faults: [...]}
    promises: [recovery_point, reclaim]

`promises` names the protective paths (harness.catalog.PATHS) the plan's faults
provoke: a run under the plan that exercised one of them zero times is
inconclusive, because it did not test what the plan claims to test.

`schedule(plan, duration)` turns it into concrete windows (same seed → same
schedule). `NemesisRunner` applies each window at its `at`, heals it at `at + for`,
writes its real start and end to `faults.jsonl`, and heals whatever is still
active in `finally`. A fault that cannot be applied or healed is a harness
failure: recorded with its error, kept in `runner.failure`, never silent.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
import yaml

from harness.catalog import PATHS
from harness.errors import HarnessError
from harness.fieldcheck import FieldChecker
from harness.nemesis.toxiproxy_client import NemesisInvalid, validate_toxic

PROCESS_ACTIONS = ("kill", "pause", "restart")
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
MIN_RANDOM_EVERY = 0.1


class PlanError(HarnessError):
    """A fault plan that cannot be used; the message names the file and the field."""


# --- the plan ---------------------------------------------------------------------

@dataclass(frozen=True)
class ToxicFault:
    proxy: str
    type: str
    stream: str = "downstream"
    attributes: dict[str, int] = field(default_factory=dict)
    toxicity: float = 1.0
    kind: str = "toxic"


@dataclass(frozen=True)
class ProcessFault:
    action: str  # kill | pause | restart
    service: str
    kind: str = "process"


@dataclass(frozen=True)
class ProxyDownFault:
    proxy: str
    kind: str = "proxy_down"


Fault = ToxicFault | ProcessFault | ProxyDownFault


@dataclass(frozen=True)
class FaultWindow:
    """One fault, active from `at` to `at + duration` seconds after the load starts."""

    name: str
    at: float
    duration: float
    fault: Fault

    @property
    def end(self) -> float:
        return self.at + self.duration


@dataclass(frozen=True)
class RandomNemesis:
    seed: int
    every: float
    duration_min: float
    duration_max: float
    faults: tuple[Fault, ...]
    start: float = 0.0


@dataclass(frozen=True)
class Plan:
    seed: int
    windows: tuple[FaultWindow, ...] = ()
    random: RandomNemesis | None = None
    source: str = "<plan>"
    promises: tuple[str, ...] = ()


# --- parsing ----------------------------------------------------------------------

def load_plan(path: Path) -> Plan:
    """Read and check a plan file; PlanError names the file and the bad field."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as error:
        raise PlanError(f"{path}: cannot read the plan: {error}") from error
    except yaml.YAMLError as error:
        raise PlanError(f"{path}: not valid YAML: {error}") from error
    return parse_plan(raw, source=str(path))


def parse_plan(raw: Any, *, source: str = "<plan>") -> Plan:
    where = _Where(source)
    top = where.mapping(raw, "plan", required=("seed",), optional=("windows", "random", "promises"))
    seed = where.integer(top["seed"], "seed")
    windows_raw = top.get("windows") or []
    if not isinstance(windows_raw, list):
        raise where.error("windows", "must be a list of windows")
    windows = tuple(_parse_window(where, item, f"windows[{i}]", i) for i, item in enumerate(windows_raw))
    random_nemesis = _parse_random(where, top["random"], seed) if top.get("random") is not None else None
    if not windows and random_nemesis is None:
        raise where.error("plan", "has neither windows nor random: nothing to do")
    return Plan(seed=seed, windows=windows, random=random_nemesis, source=source,
                promises=_parse_promises(where, top.get("promises")))


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
    item = where.mapping(raw, path, required=("at", "for"),
                         optional=("toxic", "process", "proxy_down", "name"))
    at = where.duration(item["at"], f"{path}.at")
    length = where.duration(item["for"], f"{path}.for")
    if length <= 0:
        raise where.error(f"{path}.for", "must be longer than 0s")
    fault = _parse_fault(where, item, path)
    name = item.get("name")
    if name is None:
        name = f"w{index}-{_describe(fault)}"
    elif not isinstance(name, str) or not _NAME.match(name):
        raise where.error(f"{path}.name", "must be lowercase letters, digits, '-' or '_'")
    return FaultWindow(name=name, at=at, duration=length, fault=fault)


def _parse_fault(where: _Where, item: dict[str, Any], path: str) -> Fault:
    given = [key for key in ("toxic", "process", "proxy_down") if key in item]
    if len(given) != 1:
        raise where.error(path, "needs exactly one of toxic, process, proxy_down")
    key = given[0]
    if key == "proxy_down":
        return ProxyDownFault(proxy=where.name(item[key], f"{path}.proxy_down"))
    if key == "process":
        spec = where.mapping(item[key], f"{path}.process", required=("action", "service"))
        action = spec["action"]
        if action not in PROCESS_ACTIONS:
            raise where.error(f"{path}.process.action", f"must be one of {', '.join(PROCESS_ACTIONS)}, not {action!r}")
        return ProcessFault(action=action, service=where.name(spec["service"], f"{path}.process.service"))
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
    faults = []
    for i, item in enumerate(faults_raw):
        path = f"random.faults[{i}]"
        where.mapping(item, path, optional=("toxic", "process", "proxy_down"))
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
    run is cut at its end, so every fault is healed while the load still runs.
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
        windows.append(FaultWindow(f"r{index}-{_describe(fault)}", round(at, 3), length, fault))
        index += 1
        at += spec.every
    return windows


def _describe(fault: Fault) -> str:
    if isinstance(fault, ToxicFault):
        return f"{fault.proxy}-{fault.type}-{fault.stream}"
    if isinstance(fault, ProcessFault):
        return f"{fault.action}-{fault.service}"
    return f"{fault.proxy}-down"


# --- the runner -------------------------------------------------------------------

class NetworkFaults(Protocol):
    def add_toxic(self, proxy: str, type: str, *, stream: str, attributes: dict[str, int],  # noqa: A002
                  toxicity: float, name: str | None) -> Any: ...
    def remove_toxic(self, proxy: str, name: str) -> None: ...
    def disable_proxy(self, name: str) -> None: ...
    def enable_proxy(self, name: str) -> None: ...


class ProcessFaults(Protocol):
    def kill(self, service: str) -> None: ...
    def start(self, service: str) -> None: ...
    def pause(self, service: str) -> None: ...
    def resume(self, service: str) -> None: ...
    def restart(self, service: str) -> None: ...


class NemesisRunner:
    """Runs a schedule beside the load in a background thread; heals in `finally`."""

    def __init__(self, nemesis: NetworkFaults, processes: ProcessFaults, fault_log_path: Path,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.nemesis = nemesis
        self.processes = processes
        self.fault_log_path = Path(fault_log_path)
        self.clock = clock
        self.failure: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._active: dict[str, tuple[FaultWindow, float]] = {}
        self._thread: threading.Thread | None = None

    def start(self, windows: Sequence[FaultWindow]) -> None:
        self._thread = threading.Thread(target=self.run, args=(list(windows),),
                                        name="nemesis-runner", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop early (or after the schedule) and wait until everything is healed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._fail("the nemesis runner did not finish healing in time")

    def active(self) -> list[str]:
        with self._lock:
            return sorted(self._active)

    def run(self, windows: Sequence[FaultWindow]) -> None:
        """Apply and heal every window in time order; returns when done or stopped."""
        events = sorted(
            [(w.at, 1, w) for w in windows] + [(w.end, 0, w) for w in windows],
            key=lambda event: (event[0], event[1], event[2].name),
        )
        began = self.clock()
        try:
            for when, is_apply, window in events:
                if self._stop.wait(max(0.0, began + when - self.clock())):
                    return
                if is_apply:
                    if not self._apply(window):
                        return
                elif window.name in self._active:
                    self._heal(window)
        finally:
            for name in self.active():
                self._heal(self._active[name][0])

    def _apply(self, window: FaultWindow) -> bool:
        started = time.time()
        try:
            self._do(window, apply=True)
        except Exception as error:  # noqa: BLE001 - any failure to apply is a harness failure
            message = f"could not apply {window.name}: {error}"
            self._log(window, started, time.time(), message)
            self._fail(message)
            return False
        with self._lock:
            self._active[window.name] = (window, started)
        return True

    def _heal(self, window: FaultWindow) -> None:
        with self._lock:
            _, started = self._active.pop(window.name)
        error: str | None = None
        try:
            self._do(window, apply=False)
        except Exception as failure:  # noqa: BLE001 - healing must go on for the others
            error = f"could not heal {window.name}: {failure}"
            self._fail(error)
        self._log(window, started, time.time(), error)

    def _do(self, window: FaultWindow, *, apply: bool) -> None:
        fault = window.fault
        if isinstance(fault, ToxicFault):
            if apply:
                self.nemesis.add_toxic(fault.proxy, fault.type, stream=fault.stream,
                                       attributes=dict(fault.attributes), toxicity=fault.toxicity,
                                       name=_toxic_name(window))
            else:
                self.nemesis.remove_toxic(fault.proxy, _toxic_name(window))
        elif isinstance(fault, ProxyDownFault):
            (self.nemesis.disable_proxy if apply else self.nemesis.enable_proxy)(fault.proxy)
        elif fault.action == "kill":
            (self.processes.kill if apply else self.processes.start)(fault.service)
        elif fault.action == "pause":
            (self.processes.pause if apply else self.processes.resume)(fault.service)
        elif apply:
            # A restart heals itself; its window only marks when it happened.
            self.processes.restart(fault.service)

    def _fail(self, message: str) -> None:
        if self.failure is None:
            self.failure = message
        self._stop.set()

    def _log(self, window: FaultWindow, start: float, end: float, error: str | None) -> None:
        fault = window.fault
        record: dict[str, Any] = {
            "name": window.name, "kind": fault.kind,
            "target": fault.service if isinstance(fault, ProcessFault) else fault.proxy,
            "type": fault.type if isinstance(fault, ToxicFault) else None,
            "stream": fault.stream if isinstance(fault, ToxicFault) else None,
            "attributes": dict(fault.attributes) if isinstance(fault, ToxicFault) else None,
            "toxicity": fault.toxicity if isinstance(fault, ToxicFault) else None,
            "action": fault.action if isinstance(fault, ProcessFault) else None,
            "start": start, "end": end, "error": error,
        }
        self.fault_log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, open(self.fault_log_path, "ab") as log:
            log.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))


def _toxic_name(window: FaultWindow) -> str:
    # Unique per window, so overlapping windows never collide on one proxy.
    return f"plan_{window.name}".replace("-", "_")
