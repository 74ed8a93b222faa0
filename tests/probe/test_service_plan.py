"""Probe plans with a service and dependencies (harness.probe.plan_targets): what a plan
may name, `dependencies` expanded to every dependency proxy, the bundled
`probe-dependencies` plan."""

from __future__ import annotations

import pytest

from harness.bundled import plan_path
from harness.nemesis.faults import KillChildFault, ProcessFault, ProxyDownFault, ToxicFault
from harness.nemesis.plans import Plan, PlanError
from harness.probe.plan_targets import ProbeTargets, load_probe_plan, parse_probe_plan, probe_windows

WITH_BOTH = ProbeTargets(proxies={"app": "probe_1_ab", "db": "probe_1_ab_db", "cache": "probe_1_ab_cache"},
                         service=True)


def _plan(*windows: dict, targets: ProbeTargets = WITH_BOTH) -> Plan:
    return parse_probe_plan({"seed": 1, "windows": list(windows)}, source="p.yaml", targets=targets)


def test_a_window_on_dependencies_becomes_one_per_dependency_under_its_real_name() -> None:
    plan = _plan({"at": "1s", "for": "1s", "proxy_down": "dependencies"},
                 {"at": "2s", "for": "1s", "toxic": {"proxy": "db", "type": "latency",
                                                     "attributes": {"latency": 100}}},
                 {"at": "3s", "for": "1s", "toxic": {"proxy": "app", "type": "timeout",
                                                     "attributes": {"timeout": 10}}})
    windows = probe_windows(plan, 10, WITH_BOTH)
    downs = [w for w in windows if isinstance(w.fault, ProxyDownFault)]
    assert {w.fault.proxy for w in downs} == {"probe_1_ab_db", "probe_1_ab_cache"}
    assert {(w.at, w.duration) for w in downs} == {(1.0, 1.0)}
    assert len({w.name for w in windows}) == len(windows) == 4
    toxics = {w.fault.proxy for w in windows if isinstance(w.fault, ToxicFault)}
    assert toxics == {"probe_1_ab_db", "probe_1_ab"}


@pytest.mark.parametrize("window, targets, field, words", [
    ({"proxy_down": "dependencies"}, ProbeTargets.plain(service=True), "windows[0].proxy_down",
     "no `dependencies:`"),
    ({"proxy_down": "redis"}, WITH_BOTH, "windows[0].proxy_down", "proxy 'redis' does not exist in a probe"),
    ({"process": {"action": "pause", "service": "service"}}, ProbeTargets.plain(("db",)),
     "windows[0].process.service", "give `service:` in the probe config"),
    ({"process": {"action": "restart", "service": "consumer-1"}}, WITH_BOTH, "windows[0].process.service",
     "the process it runs is called 'service'"),
    ({"process": {"action": "kill_child", "service": "service"}}, ProbeTargets.plain(("db",)),
     "windows[0].process.service", "kill_child kills a child process of the service the probe runs"),
    ({"process": {"action": "kill_child", "service": "broker"}}, WITH_BOTH, "windows[0].process.service",
     "not of 'broker'"),
    ({"process": {"action": "explode", "service": "service"}}, WITH_BOTH, "windows[0].process.action",
     "must be one of kill, pause, restart, kill_child"),
])
def test_a_target_the_probe_lacks_is_a_plan_error_naming_the_field(window: dict, targets: ProbeTargets,
                                                                    field: str, words: str) -> None:
    with pytest.raises(PlanError) as caught:
        _plan({"at": "1s", "for": "1s", **window}, targets=targets)
    message = str(caught.value)
    assert message.startswith(f"p.yaml: {field}: ") and words in message and "\n" not in message, message


def test_kill_child_is_a_fault_of_the_service_recorded_as_its_own_action() -> None:
    plan = _plan({"at": "1s", "for": "0.2s", "process": {"action": "kill_child", "service": "service"}})
    [window] = probe_windows(plan, 5, WITH_BOTH)
    assert isinstance(window.fault, KillChildFault) and window.fault.target == "service"
    assert window.fault.record(window.name)["action"] == "kill_child"


def test_random_faults_are_checked_and_expanded_too() -> None:
    raw = {"seed": 3, "random": {"every": "1s", "duration": "0.5s", "faults": [{"proxy_down": "dependencies"}]}}
    plan = parse_probe_plan(raw, source="r.yaml", targets=WITH_BOTH)
    windows = probe_windows(plan, 3, WITH_BOTH)
    assert len(windows) == 6 and {w.fault.proxy for w in windows} == {"probe_1_ab_db", "probe_1_ab_cache"}
    with pytest.raises(PlanError, match=r"r.yaml: random.faults\[0\].proxy_down: 'dependencies'"):
        probe_windows(plan, 3, ProbeTargets.plain(service=True))


def test_the_bundled_plan_faults_every_dependency_and_the_process_early() -> None:
    path = plan_path("probe-dependencies")
    targets = ProbeTargets.plain(("db", "cache"), service=True)
    plan = load_probe_plan(path, targets)
    windows = probe_windows(plan, 5.0, targets)
    assert all(w.end <= 5.0 for w in windows)
    seen = {(type(w.fault).__name__, getattr(w.fault, "type", None), w.fault.target) for w in windows}
    for dependency in ("db", "cache"):
        assert {("ToxicFault", "latency", dependency), ("ProxyDownFault", None, dependency),
                ("ToxicFault", "reset_peer", dependency)} <= seen
    actions = {w.fault.action for w in windows if isinstance(w.fault, ProcessFault)}
    assert actions >= {"pause", "kill"}
    # The latency outlasts the probe's default client timeout (1 s): clients retry
    # while the first request still waits on the dependency.
    latency = next(w.fault for w in windows if isinstance(w.fault, ToxicFault) and w.fault.type == "latency")
    assert latency.attributes["latency"] > 1000
    assert len(probe_windows(plan, 60.0, targets)) > len(windows)  # the random nemesis goes on


def test_the_bundled_plan_needs_a_service_and_dependencies() -> None:
    path = plan_path("probe-dependencies")
    with pytest.raises(PlanError, match="no `dependencies:`"):
        load_probe_plan(path, ProbeTargets.plain(service=True))
    with pytest.raises(PlanError, match="give `service:`"):
        load_probe_plan(path, ProbeTargets.plain(("db",)))
