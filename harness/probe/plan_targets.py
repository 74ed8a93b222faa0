"""What a probe's fault plan may name, and its windows aimed at the real proxies.

A probe plan is an ordinary plan (docs/nemesis.md) whose targets are the probe's:

- proxy `app`: the probe's proxy in front of the service (always there);
- proxy NAME for each of the config's `dependencies:` (the proxy between the service
  and that dependency), and `dependencies`, which stands for every one of them: a
  window on `dependencies` becomes one window per dependency, at the same time, named
  `<window>-<NAME>`. That is how a bundled plan (harness/plans/probe-dependencies.yaml)
  faults dependencies whose names only the config knows;
- service `service`: the process of `service:` (kill, pause, restart), only when the
  config has one;
- service NAME for each broker the probe owns (a `messages:` entry's `process:`, named
  by its `name`, harness.probe.brokers.process): `restart` stops it cleanly and starts
  it again, `kill`, `pause` as for the service. A process fault naming a broker the
  probe does not own is refused before the run;
- `clock:` windows (harness.nemesis.clock_faults) on `service` or on a dependency the
  probe starts itself (`command:`), never on an address-only dependency;
- `provider_fault` windows (harness.probe.provider.plan): a provider-side fault armed on
  the run's payment provider, only when the config has `provider:`;
- `explore:` (harness.nemesis.explorer, run by harness.probe.explore): crashes at the
  steps the service sends its dependencies, only with `service:` and `dependencies:`
  whose every entry says its `protocol:` (redis or postgres): the proxies read the
  steps off the wire, and a protocol is never guessed from a port.

`ProbeTargets` holds a run's names (plan name → the proxy's real name on the
Toxiproxy). `load_probe_plan(path, targets)` (or `parse_probe_plan(raw, source=...,
targets=...)`) reads a plan and checks every target
against them, each problem one line naming the file and the field (PlanError, exit 2),
before anything starts; `probe_windows(plan, duration, targets)` is the schedule with
`dependencies` expanded and every proxy renamed to its real name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.documents import load_yaml
from harness.nemesis.clock_faults import ClockFault
from harness.nemesis.faults import (
    Fault,
    FaultWindow,
    KillChildFault,
    ProcessFault,
    ProxyDownFault,
    TargetType,
    ToxicFault,
)
from harness.nemesis.plans import Plan, PlanError, PlanTargets, parse_plan, schedule
from harness.probe.provider.plan import TARGET as PROVIDER
from harness.probe.provider.plan import ProviderPlanFault, split_provider_windows

APP = "app"  # how a plan names the probe's proxy in front of the service
SERVICE = "service"  # how a plan names the service's process
DEPENDENCIES = "dependencies"  # every dependency proxy at once
# Why a broker's name is refused: the probe restarts only a broker it started itself.
NOT_OWNED = "; a broker is a process target only when its `messages:` entry has `process:` (the probe owns it)"


@dataclass(frozen=True)
class ProbeTargets:
    """A probe run's plan names: `proxies` maps each plan name (app and every
    dependency) to the proxy's name on the Toxiproxy; `service` says whether the probe
    runs the service's process; `brokers` names the processes it owns besides the
    service (the brokers of `messages:` entries, the dependencies with `command:`)."""

    proxies: Mapping[str, str]
    service: bool = False
    brokers: tuple[str, ...] = ()
    started: tuple[str, ...] = ()  # the dependencies the probe starts itself (a clock fault may move theirs)
    protocols: Mapping[str, str] = field(default_factory=dict)  # dependency -> its `protocol:` (explore)

    @classmethod
    def plain(cls, dependencies: tuple[str, ...] = (), *, service: bool = False,
              brokers: tuple[str, ...] = (), started: tuple[str, ...] = (),
              protocols: Mapping[str, str] | None = None) -> ProbeTargets:
        """Real names equal to the plan names (an embedded Toxiproxy of the probe's own)."""
        return cls(proxies={name: name for name in (APP, *dependencies)}, service=service, brokers=brokers,
                   started=started, protocols=dict(protocols or {}))

    @property
    def dependencies(self) -> tuple[str, ...]:
        return tuple(name for name in self.proxies if name != APP)


class _AnyTarget(PlanTargets):
    """Admits every name while a plan is parsed; `check_probe_plan` then checks them
    with the probe's own wording."""

    def knows(self, target_type: TargetType, name: str) -> bool:
        return True


def load_probe_plan(path: Path, targets: ProbeTargets) -> Plan:
    """Read a plan file and check its targets against a probe's (PlanError)."""
    path = Path(path)
    raw = load_yaml(path, error=PlanError, what="the plan")
    return parse_probe_plan(raw, source=str(path), targets=targets)


def parse_probe_plan(raw: Any, *, source: str, targets: ProbeTargets) -> Plan:
    """Check a plan already parsed from YAML against a probe's targets (PlanError)."""
    # `provider_fault:` windows are the probe's own kind (harness.probe.provider.plan).
    raw, provider_windows = split_provider_windows(raw, source=source)
    if provider_windows and not raw.get("windows") and raw.get("random") is None:
        plan = Plan(seed=_seed(raw, source), windows=provider_windows, source=source)
    else:
        plan = parse_plan(raw, source=source, targets=_AnyTarget(proxies=(), services=(), aged_retries=True,
                                                                explore=True))
        plan = replace(plan, windows=(*plan.windows, *provider_windows))
    check_probe_plan(plan, targets)
    return plan


def _seed(raw: Any, source: str) -> int:
    seed = raw.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise PlanError(f"{source}: seed: must be an integer")
    if raw.get("promises"):
        raise PlanError(f"{source}: promises: go with toxic windows, not with provider faults alone")
    return seed


def check_probe_plan(plan: Plan, targets: ProbeTargets) -> None:
    """PlanError naming the file and the field for the first target the probe lacks."""
    if plan.aged_retries is not None and not targets.service:
        raise PlanError(f"{plan.source}: aged_retries: the probe moves the clock of the service it starts to age "
                        "its keys; give `service:` in the probe config")
    if plan.explore is not None:
        problem = _explore_problem(targets)
        if problem is not None:
            raise PlanError(f"{plan.source}: explore: {problem}")
    located: list[tuple[str, Fault]] = [(f"windows[{i}]", window.fault) for i, window in enumerate(plan.windows)]
    if plan.random is not None:
        located += [(f"random.faults[{i}]", fault) for i, fault in enumerate(plan.random.faults)]
    for path, fault in located:
        problem = _problem(fault, targets)
        if problem is not None:
            raise PlanError(f"{plan.source}: {path}.{fault.target_field}: {problem}")


def _problem(fault: Fault, targets: ProbeTargets) -> str | None:
    if isinstance(fault, ProviderPlanFault):
        return None if PROVIDER in targets.proxies else \
            "a provider fault needs the probe's payment provider (`provider:` in the probe config)"
    if isinstance(fault, ClockFault):
        return _clock_problem(fault, targets)
    if isinstance(fault, KillChildFault):
        if fault.service == SERVICE and targets.service:
            return None
        return (f"kill_child kills a child process of the service the probe runs ({SERVICE!r}, with `service:` "
                f"in the probe config), not of {fault.service!r}")
    if isinstance(fault, ProcessFault):
        if fault.service in targets.brokers:
            return None
        if fault.service == SERVICE or not targets.brokers:
            if not targets.service:
                return (f"the probe cannot {fault.action} {fault.service!r}: it runs no process of the service "
                        f"(give `service:` in the probe config to fault it as 'service'){NOT_OWNED}")
            if fault.service == SERVICE:
                return None
            return (f"the probe cannot {fault.action} {fault.service!r}; the process it runs is called {SERVICE!r}"
                    f"{NOT_OWNED}")
        owned = ", ".join(repr(name) for name in targets.brokers)
        if targets.service:
            return (f"the probe cannot {fault.action} {fault.service!r}; the process it runs is called "
                    f"{SERVICE!r}, the brokers it owns: {owned}")
        return (f"the probe cannot {fault.action} {fault.service!r}: it owns no process of that name "
                f"(the brokers it owns: {owned})")
    if not isinstance(fault, (ToxicFault, ProxyDownFault)):
        return f"the probe cannot apply a {type(fault).__name__}"
    if fault.proxy == DEPENDENCIES:
        if not targets.dependencies:
            return (f"{DEPENDENCIES!r} stands for every dependency proxy, and the probe config has no "
                    "`dependencies:`")
        return None
    if fault.proxy not in targets.proxies:
        known = ", ".join([*targets.proxies, *([DEPENDENCIES] if targets.dependencies else [])])
        return f"proxy {fault.proxy!r} does not exist in a probe (its proxies: {known})"
    return None


def _explore_problem(targets: ProbeTargets) -> str | None:
    """Exploring crashes the service at the steps it sends its dependencies: it needs
    the service, dependencies, and each one's wire protocol."""
    if not targets.service:
        return "crashes at steps need a service the probe runs (`service:` in the probe config)"
    dependencies = [name for name in targets.dependencies if name != PROVIDER]
    if not dependencies:
        return "crashes at steps need `dependencies:` (the proxies that see the service's steps)"
    for name in dependencies:
        if name not in targets.protocols:
            return (f"dependency {name!r} has no protocol: give dependencies.{name}: {{address: ..., "
                    "protocol: redis|postgres} (the proxy reads the steps off the wire)")
    return None


def _clock_problem(fault: ClockFault, targets: ProbeTargets) -> str | None:
    """A clock fault moves a process the probe starts itself: `service`, or a
    dependency with `command:`; anything else has no fake clock to move."""
    if fault.process == SERVICE:
        return None if targets.service else (
            "a clock fault on 'service' needs `service:` in the probe config (the probe starts it under "
            "the fake clock)")
    if fault.process in targets.started:
        return None
    if fault.process in targets.brokers and fault.process in targets.dependencies:
        return (f"dependency {fault.process!r} is started by the probe but its clock cannot be read to verify "
                f"the fault; give it `clock:` (dependencies.{fault.process}.clock: redis, or "
                "{postgres: DSN})")
    if fault.process in targets.dependencies:
        return (f"dependency {fault.process!r} is an address the probe does not start, so it has no fake clock; "
                f"give it `command:` (dependencies: {{{fault.process}: {{address: ..., command: [...]}}}})")
    known = ", ".join(repr(name) for name in ([SERVICE] if targets.service else []) + list(targets.started))
    return (f"no process {fault.process!r} to move the clock of (the probe's fake clocks: {known or 'none'}; "
            "give `service:` or a dependency's `command:`)")


def probe_windows(plan: Plan, duration: float, targets: ProbeTargets, *,
                  run_seed: int | None = None) -> list[FaultWindow]:
    """The plan's windows for a run of `duration` seconds: checked, `dependencies`
    expanded to one window per dependency, proxies under their real names."""
    check_probe_plan(plan, targets)
    windows: list[FaultWindow] = []
    for window in schedule(plan, duration, run_seed=run_seed):
        fault = window.fault
        if isinstance(fault, (ToxicFault, ProxyDownFault)):
            if fault.proxy == DEPENDENCIES:
                windows.extend(replace(window, name=f"{window.name}-{name}", fault=_aimed(fault, real))
                               for name, real in targets.proxies.items() if name != APP)
                continue
            window = replace(window, fault=_aimed(fault, targets.proxies[fault.proxy]))
        windows.append(window)
    return sorted(windows, key=lambda w: (w.at, w.name))


def _aimed(fault: ToxicFault | ProxyDownFault, proxy: str) -> ToxicFault | ProxyDownFault:
    return replace(fault, proxy=proxy)
