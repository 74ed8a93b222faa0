"""A plan's provider-side faults: `provider_fault:` windows, armed on the run's provider.

    windows:
      - {at: 0.5s, for: 2s, provider_fault: {operation: payment_intents.create, status: 500,
                                             when: after, probability: 0.5}}

The fault is a `harness.provider.faults.FaultRule` (operation, status 500/429/null,
when after/before, stored fault/result, delay, count, probability): what a proxy cannot
make, such as a 500 for a request that charged. Its window arms the rule on the run's
provider through the provider's control surface (`POST /_harness/faults`), reads the
rules in force back and fails the window (the plan's failure, exit 2) when the rule is
not among them; its heal takes out that rule alone (`DELETE /_harness/faults` with the
rule, which answers the rule's hits counted up to its removal), so the config's
`provider.faults` stay. Its
line in faults.jsonl has `kind: provider_fault`, `target: provider`, the operation in
`type`, the rule's description in `action`, its `probability`, `count`, `delay_ms` and
the `hits` counted by the provider during the window.

The nemesis's plan parser knows toxics, proxies, processes and crash points only, so
`split_provider_windows` takes these windows out of a plan's YAML before it is parsed
(harness.probe.plan_targets) and gives them back as `FaultWindow`s, each error one line
naming the file and the field (PlanError). Only explicit windows: `random:` cannot hold
a provider fault. `bind_provider_faults` gives each window of a run the control of that
run's provider; a fault left unbound fails its window.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from harness.durations import parse_duration
from harness.nemesis.faults import FaultRecord, FaultWindow, TargetType
from harness.nemesis.plans import PlanError
from harness.nemesis.toxiproxy_client import NemesisError
from harness.provider.control import ProviderControl
from harness.provider.errors import ProviderError
from harness.provider.faults import FaultRule
from harness.provider.routes import OPERATIONS

KIND = "provider_fault"
TARGET = "provider"  # the plan name of the provider (its proxy's name too)
WINDOW_KEYS = ("at", "for", "name", KIND)


@dataclass(frozen=True)
class ProviderPlanFault:
    """One provider-side fault rule armed for a window (harness.nemesis.faults.Fault)."""

    kind: ClassVar[str] = KIND
    target_type: ClassVar[TargetType] = "proxy"
    target_field: ClassVar[str] = KIND

    rule: FaultRule
    control: ProviderControl | None = field(default=None, compare=False, hash=False, repr=False)
    # Per window: the hits the provider counted, read at the heal (not the fault's identity).
    _hits: dict[str, int | None] = field(default_factory=dict, compare=False, hash=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, compare=False, hash=False, repr=False)

    @property
    def target(self) -> str:
        return TARGET

    def label(self) -> str:
        what = str(self.rule.status) if self.rule.status is not None else "slow"
        return f"provider-{what}-{self.rule.when}"

    def describe(self) -> str:
        return f"provider {self.rule.describe()} on {self.rule.operation}"

    def _control(self) -> ProviderControl:
        if self.control is None:
            raise NemesisError("a provider_fault needs the run's provider (`provider:` in the probe config)")
        return self.control

    def apply(self, targets: object, window: str) -> None:
        control = self._control()
        try:
            control.add_fault(self.rule)
            armed = [rule for rule, _ in control.faults()]
        except ProviderError as error:
            raise NemesisError(f"provider fault {self.describe()}: {error}") from None
        if self.rule not in armed:  # verified: the provider reads back what is in force
            raise NemesisError(f"the provider did not arm {self.describe()} (in force: {len(armed)} other rule(s))")

    def heal(self, targets: object, window: str) -> None:
        control = self._control()
        try:
            hits: int | None = control.remove_fault(self.rule)
        except ProviderError as error:
            raise NemesisError(f"provider fault {self.describe()} not healed: {error}") from None
        with self._lock:
            self._hits[window] = hits

    def record(self, window: str) -> FaultRecord:
        with self._lock:
            hits = self._hits.get(window)
        record = FaultRecord(name=window, kind=self.kind, target=TARGET, type=self.rule.operation, stream=None,
                             attributes=None, toxicity=None, action=self.rule.describe())
        record["probability"] = self.rule.probability
        record["count"] = self.rule.count
        record["delay_ms"] = int(round(self.rule.delay * 1000))
        record["hits"] = hits
        return record


def split_provider_windows(raw: Any, *, source: str) -> tuple[Any, tuple[FaultWindow, ...]]:
    """The plan's YAML without its `provider_fault` windows, and those windows, checked."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("windows"), list):
        _no_random_provider_fault(raw, source)
        return raw, ()
    _no_random_provider_fault(raw, source)
    kept: list[Any] = []
    found: list[FaultWindow] = []
    for index, item in enumerate(raw["windows"]):
        if isinstance(item, Mapping) and KIND in item:
            found.append(_window(item, f"windows[{index}]", index, source))
        else:
            kept.append(item)
    return {**raw, "windows": kept}, tuple(found)


def bind_provider_faults(windows: Sequence[FaultWindow], control: ProviderControl | None) -> list[FaultWindow]:
    """The windows with every provider fault given `control` (the run's provider)."""
    return [replace(window, fault=replace(window.fault, control=control))
            if isinstance(window.fault, ProviderPlanFault) else window for window in windows]


def _no_random_provider_fault(raw: Any, source: str) -> None:
    randomized = raw.get("random") if isinstance(raw, Mapping) else None
    faults = randomized.get("faults") if isinstance(randomized, Mapping) else None
    if isinstance(faults, list):
        for index, item in enumerate(faults):
            if isinstance(item, Mapping) and KIND in item:
                raise PlanError(f"{source}: random.faults[{index}].{KIND}: only an explicit window (at, for) "
                                "can hold a provider fault")


def _window(item: Mapping[str, Any], path: str, index: int, source: str) -> FaultWindow:
    def error(where: str, message: str) -> PlanError:
        return PlanError(f"{source}: {path}{where}: {message}")

    unknown = sorted(set(item) - set(WINDOW_KEYS))
    if unknown:
        raise error("", f"unknown field(s) {', '.join(map(str, unknown))} beside provider_fault "
                    f"(a window has {', '.join(WINDOW_KEYS)})")
    for key in ("at", "for"):
        if key not in item:
            raise error("", f"needs {key}")
    try:
        at, length = parse_duration(item["at"]), parse_duration(item["for"])
    except (ValueError, TypeError) as problem:
        raise error("", " ".join(str(problem).split())) from None
    if at < 0:
        raise error(".at", "must not be negative")
    if length <= 0:
        raise error(".for", "must be longer than 0s")
    spec = item[KIND]
    if not isinstance(spec, Mapping):
        raise error(f".{KIND}", "must be a fault like {operation: payment_intents.create, status: 500}")
    if isinstance(spec.get("delay"), str):
        try:
            spec = {**spec, "delay": parse_duration(spec["delay"])}
        except ValueError as problem:
            raise error(f".{KIND}.delay", " ".join(str(problem).split())) from None
    try:
        rule = FaultRule.from_json(spec)
    except ProviderError as problem:
        raise error(f".{KIND}", str(problem)) from None
    if rule.operation != "*" and rule.operation not in OPERATIONS:
        raise error(f".{KIND}.operation", f"must be * or one of {', '.join(OPERATIONS)}, not {rule.operation!r}")
    fault = ProviderPlanFault(rule)
    name = item.get("name", f"w{index}-{fault.label()}")
    if not isinstance(name, str) or not name or not all(c.islower() or c.isdigit() or c in "-_" for c in name):
        raise error(".name", "must be lowercase letters, digits, '-' or '_'")
    return FaultWindow(name=name, at=at, duration=length, fault=fault)
