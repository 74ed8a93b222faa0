"""The faults a nemesis can inject, each one an object that knows itself.

Jepsen's nemesis protocol, here: every fault type implements `Fault`, so no caller
asks "which kind of fault is this?" before acting on it.

- `fault.apply(targets, window)` injects it and returns only once it is in place:
  the network side (`harness.nemesis.toxiproxy_client.Nemesis`) reads the server back
  after each change and raises `NemesisError` when the fault is not there, the process
  side (the stack's supervisor or docker) raises when the action failed. `window`
  names the fault's instance (a toxic is called `plan_<window>`), so two windows of one
  plan never collide on a proxy.
- `fault.heal(targets, window)` takes it away again and raises when it cannot: a heal
  is never dropped silently (a fault left on would be judged as the app's bug).
- `fault.describe()` is one line for people; `fault.label()` a short slug for window
  names (`app-latency-downstream`, `pause-consumer-1`, `redis-down`).
- `fault.record(window)` is its line of `faults.jsonl` without the times
  (`FaultRecord`: the file's format, docs/nemesis.md).
- `fault.target` is the proxy, service or crash point it acts on; `fault.target_type`
  says which (`proxy`, `service` or `crash_point`), and `fault.target_field` where a
  plan names it, so a plan's targets are checked before any stack starts
  (harness.nemesis.plans).

The four types: `ToxicFault` (a Toxiproxy toxic on a proxy), `ProxyDownFault` (a proxy
disabled: its listener closed, its connections cut), `ProcessFault` (a service
killed, paused or restarted) and `CrashPointFault` (a named crash point of the app
armed with an action, harness.nemesis.crash_points; healed by disarming it, and its
log line counts the hits of its window). `ProcessAction` is the one list of what can
be done to a service (by a plan, `harness fault`, the Chaos tab); `FAULT_ACTIONS` are
the ones a plan may name, each healed by its `heal_action` (a restart heals itself).
`KillChildFault` (`process: {action: kill_child, service: NAME}`) SIGKILLs one child
of a service's process, a worker's pool process, chosen by the seed; the service
itself lives on and replaces it (it heals itself), on `ChildProcessFaults`.
`FaultTargets` bundles where faults go (`NetworkFaults`, `ProcessFaults`,
`CrashPointFaults`, `ChildProcessFaults`, `ClockFaults` of harness.nemesis.fake_clock; the fifth type,
`ClockFault`, is in harness.nemesis.clock_faults), and `FaultWindow` is one fault in time (a plan's window, after
`schedule`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Literal, NotRequired, Protocol, TypedDict

from harness.nemesis.crash_points import Arming, CrashPointHit, CrashPointInfo, hits_between
from harness.nemesis.fake_clock import ClockFaults
from harness.nemesis.toxiproxy_client import NemesisError

TargetType = Literal["proxy", "service", "crash_point", "clock"]


class ProcessAction(StrEnum):
    """What can be done to one service of a stack. The order is the order users see
    the actions in (the CLI's subcommands, the Chaos tab's buttons)."""

    KILL = "kill"  # SIGKILL: the process is gone until started
    START = "start"
    PAUSE = "pause"  # SIGSTOP: connections stay open, nothing answers
    RESUME = "resume"
    RESTART = "restart"  # SIGKILL and start again at once

    @property
    def heal_action(self) -> ProcessAction | None:
        """The action that undoes this one; None when there is nothing to undo."""
        match self:
            case ProcessAction.KILL:
                return ProcessAction.START
            case ProcessAction.PAUSE:
                return ProcessAction.RESUME
            case _:
                return None

    @property
    def is_fault(self) -> bool:
        """May a plan name it? start and resume only ever heal."""
        return self in (ProcessAction.KILL, ProcessAction.PAUSE, ProcessAction.RESTART)

    @property
    def past(self) -> str:
        """`killed`, `started`, ... (for one-line confirmations)."""
        return "killed" if self is ProcessAction.KILL else f"{self.value.removesuffix('e')}ed"

    def perform(self, processes: ProcessFaults, service: str) -> None:
        """Do this action to `service`; whatever `processes` raises goes to the caller."""
        match self:
            case ProcessAction.KILL:
                processes.kill(service)
            case ProcessAction.START:
                processes.start(service)
            case ProcessAction.PAUSE:
                processes.pause(service)
            case ProcessAction.RESUME:
                processes.resume(service)
            case ProcessAction.RESTART:
                processes.restart(service)


FAULT_ACTIONS: tuple[ProcessAction, ...] = tuple(action for action in ProcessAction if action.is_fault)


# --- what faults act on -------------------------------------------------------------

class NetworkFaults(Protocol):
    """The Toxiproxy calls faults make (`Nemesis`, `StackNemesis`); each raises
    `NemesisError` when the change is not in place afterwards."""

    def add_toxic(self, proxy: str, type: str, *, stream: str = ..., attributes: dict[str, int] | None = ...,
                  toxicity: float = ..., name: str | None = ...) -> object: ...
    def remove_toxic(self, proxy: str, name: str) -> None: ...
    def disable_proxy(self, name: str) -> None: ...
    def enable_proxy(self, name: str) -> None: ...


class ProcessFaults(Protocol):
    """The process calls faults make (a running stack, or a run's recorded view of it)."""

    def kill(self, service: str) -> None: ...
    def start(self, service: str) -> None: ...
    def pause(self, service: str) -> None: ...
    def resume(self, service: str) -> None: ...
    def restart(self, service: str) -> None: ...


class CrashPointFaults(Protocol):
    """The crash-point calls faults make (`harness.nemesis.crash_points.CrashPointClient`);
    `arm` and `disarm` return only once the app reads back as asked, and raise
    `NemesisError` otherwise."""

    def point(self, name: str) -> CrashPointInfo: ...
    def arm(self, name: str, arming: Arming) -> CrashPointInfo: ...
    def disarm(self, name: str) -> CrashPointInfo: ...
    def hits(self) -> Sequence[CrashPointHit]: ...


class ChildProcessFaults(Protocol):
    """Kills one child process of a service (a worker's pool process): the child is
    chosen by `pick` (the window's name and the run's seed make it reproducible) and
    the call returns once it is gone (NemesisError: no child, or it did not die)."""

    def kill_child(self, service: str, pick: str) -> int: ...


@dataclass(frozen=True)
class FaultTargets:
    """Where faults go: a Toxiproxy (network), a stack's services (processes), the
    app's crash points and the fake clocks of the processes the harness started
    (harness.nemesis.clock_faults); None where there are none: such a fault fails."""

    network: NetworkFaults
    processes: ProcessFaults
    crash_points: CrashPointFaults | None = None
    clocks: ClockFaults | None = None
    children: ChildProcessFaults | None = None


class FaultRecord(TypedDict):
    """One fault's line of `faults.jsonl`, before its `start`, `end` and `error`.

    A crash-point window's line also has `crash_point` (its name, also `target`),
    `probability`, `count` and `delay_ms` (`action` is the armed action), and, once
    healed, `hits` (times the action fired during the window) and `hit_times` (when
    each fired, unix seconds); both are null when the window never got that far.
    A clock window's line has the fields below `hit_times`."""

    name: str
    kind: str
    target: str
    type: str | None
    stream: str | None
    attributes: dict[str, int] | None
    toxicity: float | None
    action: str | None
    crash_point: NotRequired[str]
    probability: NotRequired[float]
    count: NotRequired[int | None]
    delay_ms: NotRequired[int]
    hits: NotRequired[int | None]
    hit_times: NotRequired[list[float] | None]
    # A clock window's (harness.nemesis.clock_faults): its mode, delta and period, the
    # target's offset before and after it (seconds), the offset its own clock showed.
    clock: NotRequired[str]
    delta: NotRequired[float]
    every: NotRequired[float | None]
    offset_before: NotRequired[float | None]
    offset_after: NotRequired[float | None]
    observed_offset: NotRequired[float | None]
    flips: NotRequired[int | None]


class Fault(Protocol):
    """A fault that applies, heals, describes and records itself (module docstring)."""

    kind: ClassVar[str]  # toxic | proxy_down | process | crash_point | clock: a plan's key and the log's `kind`
    target_type: ClassVar[TargetType]
    target_field: ClassVar[str]  # where a plan's window names the target, e.g. `toxic.proxy`

    @property
    def target(self) -> str: ...
    def label(self) -> str: ...
    def describe(self) -> str: ...
    def apply(self, targets: FaultTargets, window: str) -> None: ...
    def heal(self, targets: FaultTargets, window: str) -> None: ...
    def record(self, window: str) -> FaultRecord: ...


# --- the fault types ------------------------------------------------------------------

@dataclass(frozen=True)
class ToxicFault:
    """A Toxiproxy toxic on one proxy (types and attributes: docs/toxiproxy.md)."""

    kind: ClassVar[str] = "toxic"
    target_type: ClassVar[TargetType] = "proxy"
    target_field: ClassVar[str] = "toxic.proxy"

    proxy: str
    type: str
    stream: str = "downstream"
    attributes: dict[str, int] = field(default_factory=dict)
    toxicity: float = 1.0

    @property
    def target(self) -> str:
        return self.proxy

    @staticmethod
    def toxic_name(window: str) -> str:
        """The toxic's name on the proxy: unique per window, in Toxiproxy's alphabet."""
        return f"plan_{window}".replace("-", "_")

    def label(self) -> str:
        return f"{self.proxy}-{self.type}-{self.stream}"

    def describe(self) -> str:
        shown = "".join(f" {key}={value}" for key, value in self.attributes.items())
        return f"{self.type} on {self.proxy} {self.stream}{shown} toxicity={self.toxicity:g}"

    def apply(self, targets: FaultTargets, window: str) -> None:
        targets.network.add_toxic(self.proxy, self.type, stream=self.stream, attributes=dict(self.attributes),
                                  toxicity=self.toxicity, name=self.toxic_name(window))

    def heal(self, targets: FaultTargets, window: str) -> None:
        targets.network.remove_toxic(self.proxy, self.toxic_name(window))

    def record(self, window: str) -> FaultRecord:
        return FaultRecord(name=window, kind=self.kind, target=self.proxy, type=self.type, stream=self.stream,
                           attributes=dict(self.attributes), toxicity=self.toxicity, action=None)


@dataclass(frozen=True)
class ProxyDownFault:
    """A proxy disabled: new connections refused, open ones cut, until enabled."""

    kind: ClassVar[str] = "proxy_down"
    target_type: ClassVar[TargetType] = "proxy"
    target_field: ClassVar[str] = "proxy_down"

    proxy: str

    @property
    def target(self) -> str:
        return self.proxy

    def label(self) -> str:
        return f"{self.proxy}-down"

    def describe(self) -> str:
        return f"proxy {self.proxy} down"

    def apply(self, targets: FaultTargets, window: str) -> None:
        targets.network.disable_proxy(self.proxy)

    def heal(self, targets: FaultTargets, window: str) -> None:
        targets.network.enable_proxy(self.proxy)

    def record(self, window: str) -> FaultRecord:
        return FaultRecord(name=window, kind=self.kind, target=self.proxy, type=None, stream=None,
                           attributes=None, toxicity=None, action=None)


@dataclass(frozen=True)
class ProcessFault:
    """A service killed (healed by a start), paused (healed by a resume) or restarted
    (heals itself: its window only marks when it happened)."""

    kind: ClassVar[str] = "process"
    target_type: ClassVar[TargetType] = "service"
    target_field: ClassVar[str] = "process.service"

    action: ProcessAction
    service: str

    def __post_init__(self) -> None:
        # Plans and callers give the action as text; keep the one spelling of it.
        try:
            action = ProcessAction(self.action)
        except ValueError:
            raise ValueError(f"process action must be one of {', '.join(FAULT_ACTIONS)}, "
                             f"not {self.action!r}") from None
        if not action.is_fault:
            raise ValueError(f"{action} heals a fault; a fault is one of {', '.join(FAULT_ACTIONS)}")
        object.__setattr__(self, "action", action)

    @property
    def target(self) -> str:
        return self.service

    def label(self) -> str:
        return f"{self.action}-{self.service}"

    def describe(self) -> str:
        return f"{self.action} {self.service}"

    def apply(self, targets: FaultTargets, window: str) -> None:
        self.action.perform(targets.processes, self.service)

    def heal(self, targets: FaultTargets, window: str) -> None:
        heal = self.action.heal_action
        if heal is not None:
            heal.perform(targets.processes, self.service)

    def record(self, window: str) -> FaultRecord:
        return FaultRecord(name=window, kind=self.kind, target=self.service, type=None, stream=None,
                           attributes=None, toxicity=None, action=self.action.value)


KILL_CHILD = "kill_child"


@dataclass(frozen=True)
class KillChildFault:
    """One child process of a service SIGKILLed (a pool process of a worker: Celery's
    prefork child, gunicorn's worker); the service replaces it itself, so nothing is
    healed. Where the harness has no child processes to kill (FaultTargets.children is
    None) it fails with NemesisError."""

    kind: ClassVar[str] = "process"
    target_type: ClassVar[TargetType] = "service"
    target_field: ClassVar[str] = "process.service"

    service: str

    @property
    def target(self) -> str:
        return self.service

    def label(self) -> str:
        return f"{KILL_CHILD.replace('_', '-')}-{self.service}"

    def describe(self) -> str:
        return f"kill a child process of {self.service}"

    def apply(self, targets: FaultTargets, window: str) -> None:
        if targets.children is None:
            raise NemesisError(f"{window}: kill_child: no child processes to kill here (the probe's service only)")
        targets.children.kill_child(self.service, window)

    def heal(self, targets: FaultTargets, window: str) -> None:
        return None  # the service starts a new child itself

    def record(self, window: str) -> FaultRecord:
        return FaultRecord(name=window, kind=self.kind, target=self.service, type=None, stream=None,
                           attributes=None, toxicity=None, action=KILL_CHILD)


@dataclass(frozen=True)
class _Observed:
    """What one window of a crash point saw: when it was armed, and at its heal the
    times of the hits logged in between (its hits are those)."""

    armed_at: float
    hit_times: tuple[float, ...] | None = None


@dataclass(frozen=True)
class CrashPointFault:
    """A crash point of the app armed (`Arming`: action, probability, count, delay),
    healed by disarming it; both read back. Its log line counts the window's hits."""

    kind: ClassVar[str] = "crash_point"
    target_type: ClassVar[TargetType] = "crash_point"
    target_field: ClassVar[str] = "crash_point"

    point: str
    arming: Arming
    # Per window (a random nemesis reuses one fault in many): what apply saw, for heal
    # and record. Not part of the fault's identity.
    _observed: dict[str, _Observed] = field(default_factory=dict, compare=False, hash=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, hash=False, repr=False)

    @property
    def target(self) -> str:
        return self.point

    def label(self) -> str:
        return f"{self.point.replace('.', '-')}-{self.arming.action}"

    def describe(self) -> str:
        return f"{self.arming.describe()} at crash point {self.point}"

    @staticmethod
    def _client(targets: FaultTargets) -> CrashPointFaults:
        if targets.crash_points is None:
            raise NemesisError("no crash points to arm here: the target of this fault is not a stack's app")
        return targets.crash_points

    def apply(self, targets: FaultTargets, window: str) -> None:
        client = self._client(targets)
        armed_at = time.time()
        client.arm(self.point, self.arming)  # raises unless the read-back shows the arming
        with self._lock:
            self._observed[window] = _Observed(armed_at=armed_at)

    def heal(self, targets: FaultTargets, window: str) -> None:
        client = self._client(targets)
        client.disarm(self.point)
        disarmed_at = time.time()
        with self._lock:
            seen = self._observed.get(window)
        if seen is None:
            return  # not armed by this window (a heal of a window applied elsewhere)
        # One source for the count and the times: the hits log, read after the disarm.
        # (The point's counter read at the disarm can miss a hit whose line was still
        # being appended then, and the two disagreed: 4 hits, 5 times.)
        try:
            times = tuple(hit.at for hit in hits_between(client.hits(), self.point, seen.armed_at, disarmed_at))
        except NemesisError as error:
            raise NemesisError(f"crash point {self.point} disarmed, but its hits could not be read: {error}") from None
        with self._lock:
            self._observed[window] = _Observed(seen.armed_at, hit_times=times)

    def record(self, window: str) -> FaultRecord:
        with self._lock:
            seen = self._observed.get(window)
        record = FaultRecord(name=window, kind=self.kind, target=self.point, type=None, stream=None,
                             attributes=None, toxicity=None, action=self.arming.action)
        record["crash_point"] = self.point
        record["probability"] = self.arming.probability
        record["count"] = self.arming.count
        record["delay_ms"] = self.arming.delay_ms
        record["hits"] = len(seen.hit_times) if seen is not None and seen.hit_times is not None else None
        record["hit_times"] = list(seen.hit_times) if seen is not None and seen.hit_times is not None else None
        return record


@dataclass(frozen=True)
class FaultWindow:
    """One fault, active from `at` to `at + duration` seconds after the load starts;
    `name` is unique within a run's schedule (the fault's instance: its log line,
    its toxic's name)."""

    name: str
    at: float
    duration: float
    fault: Fault

    @property
    def end(self) -> float:
        return self.at + self.duration
