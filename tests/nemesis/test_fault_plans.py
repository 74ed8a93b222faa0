"""Fault plans: parse errors name the file and field (and a target the stack does not
have), schedules are deterministic, faults know themselves, and the runner applies,
logs and heals every fault, and reports the ones it could not heal."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from harness.nemesis.clock_faults import ClockFault
from harness.nemesis.crash_points import Arming, CrashPointHit, CrashPointInfo
from harness.nemesis.faults import FAULT_ACTIONS, FaultTargets, ProcessAction
from harness.nemesis.plans import (
    STACK_TARGETS,
    CrashPointFault,
    FaultWindow,
    NemesisFailed,
    NemesisRunner,
    PlanError,
    PlanTargets,
    ProcessFault,
    ProxyDownFault,
    ToxicFault,
    check_targets,
    load_plan,
    parse_plan,
    schedule,
)
from harness.nemesis.toxiproxy_client import Nemesis, NemesisError
from harness.ports import free_port
from harness.toxiproxy.server import EmbeddedToxiproxy

PLANS = Path(__file__).resolve().parents[2] / "harness" / "plans"
# Plans of a stack; `probe-*` plans name a probe's targets (its service, its
# dependencies), as does `every-step` (a probe explores), and are checked against a
# probe config in tests/probe.
STACK_PLANS = sorted(p for p in PLANS.glob("*.yaml") if not p.stem.startswith("probe-") and p.stem != "every-step")
TOXIC = {"proxy": "app", "type": "latency", "stream": "downstream", "attributes": {"latency": 800}}


# --- parsing ----------------------------------------------------------------------

@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        ({"seed": 1, "windows": [], "colour": 3}, "plan", "unknown key(s) colour"),
        ({"windows": [{"at": "1s", "for": "1s", "proxy_down": "redis"}]}, "plan", "missing seed"),
        ({"seed": -1, "windows": [{"at": "1s", "for": "1s", "proxy_down": "redis"}]}, "seed", "non-negative"),
        ({"seed": 1, "windows": [{"at": "3x", "for": "1s", "proxy_down": "redis"}]}, "windows[0].at", "not a duration"),
        ({"seed": 1, "windows": [{"at": "-2s", "for": "1s", "proxy_down": "redis"}]}, "windows[0].at", "not a duration"),
        ({"seed": 1, "windows": [{"at": "1s", "for": "0s", "proxy_down": "redis"}]}, "windows[0].for", "longer than 0s"),
        ({"seed": 1, "windows": [{"at": "1s", "proxy_down": "redis"}]}, "windows[0]", "missing for"),
        ({"seed": 1, "windows": [{"at": "1s", "for": "1s"}]}, "windows[0]", "exactly one of"),
        ({"seed": 1, "windows": [{"at": "1s", "for": "1s", "proxy_down": "redis", "toxic": TOXIC}]},
         "windows[0]", "exactly one of"),
        ({"seed": 1, "windows": [{"at": "1s", "for": "1s", "process": {"action": "nuke", "service": "app"}}]},
         "windows[0].process.action", "must be one of kill, pause, restart"),
        ({"seed": 1, "windows": [{"at": "1s", "for": "1s", "toxic": {**TOXIC, "type": "gremlin"}}]},
         "windows[0].toxic", "unknown toxic type"),
        ({"seed": 1, "windows": [{"at": "1s", "for": "1s", "toxic": {**TOXIC, "attributes": {"latency": -5}}}]},
         "windows[0].toxic", "non-negative integer"),
        ({"seed": 1, "windows": [{"at": "1s", "for": "1s", "toxic": {**TOXIC, "toxicity": 1.5}}]},
         "windows[0].toxic", "toxicity"),
        ({"seed": 1, "windows": [{"at": "1s", "for": "1s", "toxic": {**TOXIC, "colour": "red"}}]},
         "windows[0].toxic", "unknown key(s) colour"),
        ({"seed": 1, "random": {"every": "2s", "duration": "1s-3s", "faults": [{"proxy_down": "redis"}]}},
         "random.duration", "at most random.every"),
        ({"seed": 1, "random": {"every": "2s", "duration": "3s-1s", "faults": [{"proxy_down": "redis"}]}},
         "random.duration", "backwards"),
        ({"seed": 1, "random": {"every": "0s", "duration": "0s", "faults": [{"proxy_down": "redis"}]}},
         "random.every", "at least"),
        ({"seed": 1, "random": {"every": "2s", "duration": "1s", "faults": []}}, "random.faults", "non-empty"),
        ({"seed": 1}, "plan", "nothing to do"),
    ],
)
def test_bad_plans_name_the_file_and_field(raw: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(PlanError) as caught:
        parse_plan(raw, source="harness/plans/bad.yaml")
    message = str(caught.value)
    assert message.startswith(f"harness/plans/bad.yaml: {field}: "), message
    assert words in message


@pytest.mark.parametrize(
    ("window", "field", "words"),
    [
        ({"toxic": {**TOXIC, "proxy": "ap"}}, "windows[0].toxic.proxy", "unknown proxy 'ap' (known: app, redis)"),
        ({"proxy_down": "postgres"}, "windows[0].proxy_down", "unknown proxy 'postgres' (known: app, redis)"),
        ({"process": {"action": "kill", "service": "consumer"}}, "windows[0].process.service",
         "unknown service 'consumer' (known: app, redis, toxiproxy, consumer-N)"),
        ({"process": {"action": "pause", "service": "consumer-0"}}, "windows[0].process.service",
         "unknown service 'consumer-0'"),
    ],
)
def test_a_target_the_stack_does_not_have_is_refused_when_read(
        tmp_path: Path, window: dict[str, Any], field: str, words: str) -> None:
    plan = tmp_path / "typo.yaml"
    plan.write_text(yaml.safe_dump({"seed": 1, "windows": [{"at": "1s", "for": "1s", **window}]}))
    with pytest.raises(PlanError) as caught:
        load_plan(plan)
    message = str(caught.value)
    assert message.startswith(f"{plan}: {field}: {words}"), message
    assert "\n" not in message


def test_random_faults_are_checked_too_and_a_stack_can_be_exact() -> None:
    raw = {"seed": 1, "random": {"every": "2s", "duration": "1s",
                                 "faults": [{"proxy_down": "redis"}, {"proxy_down": "redsi"}]}}
    with pytest.raises(PlanError, match=r"^p\.yaml: random\.faults\[1\]\.proxy_down: unknown proxy 'redsi'"):
        parse_plan(raw, source="p.yaml")
    # Read before the stack: any consumer-N; against a stack of two: consumer-1 and -2 only.
    plan = parse_plan({"seed": 1, "windows": [{"at": "1s", "for": "1s",
                                               "process": {"action": "kill", "service": "consumer-3"}}]})
    two = PlanTargets.of_stack(["app", "redis"], ["redis", "toxiproxy", "app", "consumer-1", "consumer-2"])
    with pytest.raises(PlanError, match=r"consumer-3' \(known: redis, toxiproxy, app, consumer-1, consumer-2\)"):
        check_targets(plan, two)
    check_targets(plan, STACK_TARGETS)
    assert STACK_TARGETS.knows("service", "consumer-12") and not STACK_TARGETS.knows("proxy", "consumer-1")


def test_unreadable_and_invalid_yaml_files_are_plan_errors(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="cannot read"):
        load_plan(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("seed: [1\n")
    with pytest.raises(PlanError, match=f"{broken}: not valid YAML"):
        load_plan(broken)


def test_a_full_plan_parses_into_typed_windows() -> None:
    plan = parse_plan({
        "seed": 7,
        "windows": [
            {"at": "2s", "for": "3s", "toxic": {**TOXIC, "toxicity": 0.5}},
            {"at": "5s", "for": "2s", "process": {"action": "pause", "service": "consumer-1"}},
            {"at": 4, "for": "500ms", "proxy_down": "redis", "name": "redis-gone"},
        ],
    })
    first, second, third = plan.windows
    assert first.fault == ToxicFault("app", "latency", "downstream", {"latency": 800}, 0.5)
    assert (first.at, first.duration) == (2.0, 3.0)
    assert second.fault == ProcessFault("pause", "consumer-1")
    assert third == FaultWindow("redis-gone", 4.0, 0.5, ProxyDownFault("redis"))


@pytest.mark.parametrize("path", STACK_PLANS, ids=lambda p: p.stem)
def test_shipped_plans_load_and_fill_short_and_long_runs(path: Path) -> None:
    plan = load_plan(path)
    for duration in (10.0, 60.0):
        windows = schedule(plan, duration)
        assert windows, f"{path.name} schedules nothing in {duration}s"
        assert all(0 <= w.at < duration and w.end <= duration for w in windows)
        assert len({w.name for w in windows}) == len(windows)


def test_shipped_plans_cover_the_promised_faults() -> None:
    kinds = {p.stem: {_kind(w.fault) for w in schedule(load_plan(p), 60.0)} for p in STACK_PLANS}
    assert {"toxic:app:latency", "toxic:app:timeout", "toxic:app:limit_data",
            "toxic:redis:limit_data"} <= kinds["flaky-network"]
    assert {"toxic:redis:latency", "toxic:redis:reset_peer", "proxy_down:redis"} <= kinds["redis-brownout"]
    assert {"process:kill", "process:pause"} <= kinds["consumer-crashes"]
    assert len(kinds["chaos"]) >= 4
    assert {"crash_point:crash", "crash_point:error", "crash_point:drop-reply"} == kinds["crash-points"]
    assert {"crash_point:delay", "clock:app:jump"} == kinds["lease-clock-jumps"]


SMOKE_SECONDS = 8.0


def test_flaky_network_holds_every_fault_it_claims_within_a_smoke_run() -> None:
    windows = schedule(load_plan(PLANS / "flaky-network.yaml"), SMOKE_SECONDS)
    toxics = [w.fault for w in windows if isinstance(w.fault, ToxicFault)]
    # Answers lost past the client timeout (replays).
    assert any(t.proxy == "app" and t.type == "latency" and t.stream == "downstream"
               and t.attributes["latency"] > 2000 for t in toxics)
    # Redis replies lost after the command ran (the API layer's recovery point).
    assert any(t.proxy == "redis" and t.stream == "downstream"
               and t.type in ("limit_data", "reset_peer", "timeout") for t in toxics)
    # Bodies cut after the headers: a create request's headers are 260-330 bytes and
    # its body about 65 (measured with the load's own keys and tenants).
    cuts = [t for t in toxics if t.proxy == "app" and t.type == "limit_data"]
    assert cuts and all(t.stream == "upstream" and 0 < t.toxicity < 1.0
                        and 280 <= t.attributes["bytes"] <= 340 for t in cuts)
    # Faults leave room for clean load: at most 6 of the 8 seconds are faulted.
    assert sum(w.duration for w in windows) <= 6.0
    # What the windows provoke is promised, so a run that missed it is inconclusive
    # (tests/load/test_plans.py measures both against a real stack).
    assert load_plan(PLANS / "flaky-network.yaml").promises == ("recovery_point", "incomplete_body")


def _kind(fault: Any) -> str:
    if isinstance(fault, ToxicFault):
        return f"toxic:{fault.proxy}:{fault.type}"
    if isinstance(fault, ProcessFault):
        return f"process:{fault.action}"
    if isinstance(fault, CrashPointFault):
        return f"crash_point:{fault.arming.action}"
    if isinstance(fault, ClockFault):
        return f"clock:{fault.process}:{fault.mode}"
    return f"proxy_down:{fault.proxy}"


# --- faults -----------------------------------------------------------------------

def test_process_actions_are_one_list_and_each_fault_knows_its_heal() -> None:
    assert [action.value for action in ProcessAction] == ["kill", "start", "pause", "resume", "restart"]
    assert FAULT_ACTIONS == (ProcessAction.KILL, ProcessAction.PAUSE, ProcessAction.RESTART)
    assert {action: action.heal_action for action in FAULT_ACTIONS} == {
        ProcessAction.KILL: ProcessAction.START, ProcessAction.PAUSE: ProcessAction.RESUME,
        ProcessAction.RESTART: None}
    assert [action.past for action in ProcessAction] == ["killed", "started", "paused", "resumed", "restarted"]
    with pytest.raises(ValueError, match="heals a fault"):
        ProcessFault("resume", "app")
    with pytest.raises(ValueError, match="must be one of kill, pause, restart"):
        ProcessFault("nuke", "app")


def test_each_fault_describes_labels_and_records_itself() -> None:
    toxic = ToxicFault("redis", "limit_data", "upstream", {"bytes": 300}, 0.3)
    down = ProxyDownFault("app")
    pause = ProcessFault("pause", "consumer-2")
    assert [f.describe() for f in (toxic, down, pause)] == [
        "limit_data on redis upstream bytes=300 toxicity=0.3", "proxy app down", "pause consumer-2"]
    assert [f.label() for f in (toxic, down, pause)] == ["redis-limit_data-upstream", "app-down", "pause-consumer-2"]
    assert [(f.kind, f.target_type, f.target) for f in (toxic, down, pause)] == [
        ("toxic", "proxy", "redis"), ("proxy_down", "proxy", "app"), ("process", "service", "consumer-2")]
    assert toxic.record("w0") == {"name": "w0", "kind": "toxic", "target": "redis", "type": "limit_data",
                                  "stream": "upstream", "attributes": {"bytes": 300}, "toxicity": 0.3,
                                  "action": None}
    assert pause.record("w1")["action"] == "pause" and down.record("w2")["target"] == "app"


def test_a_fault_applies_and_heals_itself_on_its_targets(tmp_path: Path) -> None:
    processes = FakeProcesses()
    targets = FaultTargets(network=FakeNetwork(), processes=processes)
    for fault in (ProcessFault("kill", "redis"), ProcessFault("pause", "app"), ProcessFault("restart", "app")):
        fault.apply(targets, "w")
        fault.heal(targets, "w")
    assert processes.calls == [("kill", "redis"), ("start", "redis"), ("pause", "app"), ("resume", "app"),
                               ("restart", "app")]
    network = FakeNetwork()
    targets = FaultTargets(network=network, processes=processes)
    ToxicFault("app", "latency", attributes={"latency": 5}).apply(targets, "w3-slow")
    ProxyDownFault("redis").apply(targets, "w4")
    ToxicFault("app", "latency").heal(targets, "w3-slow")
    ProxyDownFault("redis").heal(targets, "w4")
    assert network.calls == [("add", "app", "plan_w3_slow"), ("disable", "redis"), ("remove", "app", "plan_w3_slow"),
                             ("enable", "redis")]


# --- schedule ---------------------------------------------------------------------

RANDOM_PLAN = {
    "seed": 5,
    "windows": [{"at": "1s", "for": "2s", "proxy_down": "redis"},
                {"at": "9s", "for": "5s", "proxy_down": "app"},
                {"at": "12s", "for": "1s", "proxy_down": "app"}],
    "random": {"every": "2s", "duration": "500ms-2s", "start": "1s",
               "faults": [{"toxic": TOXIC}, {"proxy_down": "redis"},
                          {"process": {"action": "kill", "service": "consumer-1"}}]},
}


def test_same_seed_same_schedule_and_another_seed_another() -> None:
    first = schedule(parse_plan(RANDOM_PLAN), 30.0)
    assert first == schedule(parse_plan(RANDOM_PLAN), 30.0)
    other = schedule(parse_plan({**RANDOM_PLAN, "seed": 6}), 30.0)
    assert [(w.at, w.duration, w.fault) for w in first] != [(w.at, w.duration, w.fault) for w in other]
    assert [w.at for w in first] == sorted(w.at for w in first)


def test_windows_past_the_run_are_dropped_and_long_ones_cut() -> None:
    windows = schedule(parse_plan(RANDOM_PLAN), 10.0)
    explicit = [w for w in windows if w.name.startswith("w")]
    assert [(w.at, w.duration) for w in explicit] == [(1.0, 2.0), (9.0, 1.0)]
    randoms = [w for w in windows if w.name.startswith("r")]
    assert [w.at for w in randoms] == [1.0, 3.0, 5.0, 7.0, 9.0]
    assert all(w.end <= 10.0 for w in windows)


# --- the runner -------------------------------------------------------------------

class FakeProcesses:
    """Records process actions; can fail one action, and can run a probe on one."""

    def __init__(self, fail_on: str | None = None, probe: Any = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail_on = fail_on
        self.probe = probe
        self.seen: Any = None

    def _act(self, action: str, service: str) -> None:
        self.calls.append((action, service))
        if action == self.fail_on:
            raise OSError(f"{service} refused to {action}")
        if self.probe is not None and action == "restart":
            self.seen = self.probe()

    def kill(self, service: str) -> None:
        self._act("kill", service)

    def start(self, service: str) -> None:
        self._act("start", service)

    def pause(self, service: str) -> None:
        self._act("pause", service)

    def resume(self, service: str) -> None:
        self._act("resume", service)

    def restart(self, service: str) -> None:
        self._act("restart", service)


class FakeNetwork:
    """Records network calls; can refuse every heal (remove, enable) once `refuse` is set."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.refuse = False

    def add_toxic(self, proxy: str, type: str, *, stream: str = "downstream",  # noqa: A002
                  attributes: dict[str, int] | None = None, toxicity: float = 1.0,
                  name: str | None = None) -> None:
        self.calls.append(("add", proxy, str(name)))

    def remove_toxic(self, proxy: str, name: str) -> None:
        self.calls.append(("remove", proxy, name))
        if self.refuse:
            raise NemesisError(f"remove toxic {name} from {proxy}: toxiproxy refused")

    def disable_proxy(self, name: str) -> None:
        self.calls.append(("disable", name))

    def enable_proxy(self, name: str) -> None:
        self.calls.append(("enable", name))
        if self.refuse:
            raise NemesisError(f"enable proxy {name}: toxiproxy refused")


@pytest.fixture(scope="module")
def nemesis() -> Iterator[Nemesis]:
    # One server for the whole module (`clean` resets it between tests), so not the
    # function-scoped `embedded_toxiproxy`.
    with EmbeddedToxiproxy() as toxiproxy:
        client = Nemesis(toxiproxy.url)
        for name in ("app", "redis"):
            client.ensure_proxy(name, f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}")
        yield client


@pytest.fixture
def clean(nemesis: Nemesis) -> Iterator[Nemesis]:
    nemesis.reset()
    yield nemesis
    nemesis.reset()


def _log(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _network_state(nemesis: Nemesis) -> tuple[list[str], dict[str, bool]]:
    return ([t.name for t in nemesis.list_toxics()],
            {name: info.enabled for name, info in nemesis.proxies().items()})


def test_every_applied_fault_is_logged_with_start_and_end_and_healed(clean: Nemesis, tmp_path: Path) -> None:
    windows = [
        FaultWindow("slow-app", 0.0, 0.6, ToxicFault("app", "latency", "downstream", {"latency": 300}, 1.0)),
        FaultWindow("redis-down", 0.1, 0.5, ProxyDownFault("redis")),
        FaultWindow("pause-c1", 0.0, 0.3, ProcessFault("pause", "consumer-1")),
        FaultWindow("kill-c2", 0.1, 0.2, ProcessFault("kill", "consumer-2")),
        FaultWindow("restart-app", 0.3, 0.1, ProcessFault("restart", "app")),
    ]
    processes = FakeProcesses(probe=lambda: _network_state(clean))
    log = tmp_path / "faults.jsonl"
    runner = NemesisRunner(clean, processes, log)
    began = time.time()
    runner.run(windows)

    assert runner.failure is None
    # While the windows overlapped, the toxic and the disabled proxy were really there.
    toxics, enabled = processes.seen
    assert toxics == ["plan_slow_app"] and enabled == {"app": True, "redis": False}
    assert _network_state(clean) == ([], {"app": True, "redis": True})
    assert sorted(processes.calls) == sorted([("pause", "consumer-1"), ("kill", "consumer-2"),
                                              ("resume", "consumer-1"), ("start", "consumer-2"),
                                              ("restart", "app")])
    lines = {line["name"]: line for line in _log(log)}
    assert set(lines) == {w.name for w in windows}
    for window in windows:
        line = lines[window.name]
        assert line["error"] is None
        assert began <= line["start"] <= line["end"]
        assert line["end"] - line["start"] >= window.duration - 0.05
        assert line["kind"] == window.fault.kind
    assert lines["slow-app"]["target"] == "app" and lines["slow-app"]["attributes"] == {"latency": 300}
    assert lines["pause-c1"]["action"] == "pause" and lines["pause-c1"]["target"] == "consumer-1"
    assert lines["redis-down"]["type"] is None and lines["redis-down"]["target"] == "redis"


def test_a_fault_that_cannot_be_applied_is_a_recorded_failure_and_the_rest_is_healed(
        clean: Nemesis, tmp_path: Path) -> None:
    windows = [
        FaultWindow("slow-app", 0.0, 5.0, ToxicFault("app", "latency", "downstream", {"latency": 100}, 1.0)),
        FaultWindow("redis-down", 0.0, 5.0, ProxyDownFault("redis")),
        FaultWindow("kill-c1", 0.1, 5.0, ProcessFault("kill", "consumer-1")),
        FaultWindow("pause-c2", 0.2, 1.0, ProcessFault("pause", "consumer-2")),
    ]
    processes = FakeProcesses(fail_on="kill")
    log = tmp_path / "faults.jsonl"
    runner = NemesisRunner(clean, processes, log)
    started = time.monotonic()
    runner.run(windows)

    assert time.monotonic() - started < 3.0, "the runner kept waiting after a failure"
    assert runner.failure is not None and "kill-c1" in runner.failure
    assert runner.active() == []
    assert _network_state(clean) == ([], {"app": True, "redis": True})
    assert ("pause", "consumer-2") not in processes.calls, "a window after the failure was applied"
    lines = {line["name"]: line for line in _log(log)}
    assert "consumer-1 refused to kill" in lines["kill-c1"]["error"]
    assert lines["slow-app"]["error"] is None and lines["redis-down"]["error"] is None


def test_a_fault_that_cannot_be_applied_on_the_proxy_side_is_a_failure(clean: Nemesis, tmp_path: Path) -> None:
    windows = [FaultWindow("ghost", 0.0, 1.0, ProxyDownFault("no-such-proxy"))]
    runner = NemesisRunner(clean, FakeProcesses(), tmp_path / "faults.jsonl")
    runner.run(windows)
    assert runner.failure is not None and "ghost" in runner.failure
    assert _log(tmp_path / "faults.jsonl")[0]["error"]


def test_stopping_early_heals_what_is_active(clean: Nemesis, tmp_path: Path) -> None:
    windows = [
        FaultWindow("slow-app", 0.0, 30.0, ToxicFault("app", "latency", "downstream", {"latency": 100}, 1.0)),
        FaultWindow("pause-c1", 0.0, 30.0, ProcessFault("pause", "consumer-1")),
        FaultWindow("later", 20.0, 1.0, ProxyDownFault("redis")),
    ]
    processes = FakeProcesses()
    log = tmp_path / "faults.jsonl"
    runner = NemesisRunner(clean, processes, log)
    runner.start(windows)
    deadline = time.monotonic() + 5.0
    while len(runner.active()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert runner.active() == ["pause-c1", "slow-app"]
    runner.stop()  # as the harness does when the load crashes

    assert runner.active() == [] and runner.failure is None
    assert _network_state(clean) == ([], {"app": True, "redis": True})
    assert processes.calls == [("pause", "consumer-1"), ("resume", "consumer-1")]
    names = sorted(line["name"] for line in _log(log))
    assert names == ["pause-c1", "slow-app"]


def test_a_heal_the_toxiproxy_refuses_is_reported_and_the_others_still_healed(tmp_path: Path) -> None:
    windows = [
        FaultWindow("slow-app", 0.0, 30.0, ToxicFault("app", "latency", "downstream", {"latency": 100}, 1.0)),
        FaultWindow("redis-down", 0.0, 30.0, ProxyDownFault("redis")),
        FaultWindow("pause-c1", 0.0, 30.0, ProcessFault("pause", "consumer-1")),
    ]
    network, processes = FakeNetwork(), FakeProcesses()
    runner = NemesisRunner(network, processes, tmp_path / "faults.jsonl")
    runner.start(windows)
    deadline = time.monotonic() + 5.0
    while len(runner.active()) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    network.refuse = True
    runner.stop()

    report = runner.report()
    assert not report.ok
    assert sorted(report.unhealed) == ["redis-down", "slow-app"]
    assert {(f.window, f.phase) for f in report.failures} == {("redis-down", "heal"), ("slow-app", "heal")}
    assert ("resume", "consumer-1") in processes.calls, "one refused heal stopped the others"
    with pytest.raises(NemesisFailed) as caught:
        report.raise_for_failure()
    assert "could not heal slow-app" in str(caught.value) and "\n" not in str(caught.value)
    lines = {line["name"]: line for line in _log(tmp_path / "faults.jsonl")}
    assert "toxiproxy refused" in lines["slow-app"]["error"] and lines["pause-c1"]["error"] is None


def test_a_toxiproxy_gone_mid_run_makes_the_heal_a_reported_failure(tmp_path: Path) -> None:
    server = EmbeddedToxiproxy().start()
    try:
        client = Nemesis(server.url)
        client.ensure_proxy("app", f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}")
        window = FaultWindow("slow-app", 0.0, 30.0, ToxicFault("app", "latency", attributes={"latency": 10}))
        runner = NemesisRunner(client, FakeProcesses(), tmp_path / "faults.jsonl")
        runner.start([window])
        deadline = time.monotonic() + 5.0
        while not runner.active() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert runner.active() == ["slow-app"]
    finally:
        server.stop()
    runner.stop()
    report = runner.report()
    assert report.unhealed == ("slow-app",)
    assert runner.failure is not None and runner.failure.startswith("could not heal slow-app: ")
    assert "unreachable" in runner.failure


def test_a_clean_schedule_reports_ok(clean: Nemesis, tmp_path: Path) -> None:
    runner = NemesisRunner(clean, FakeProcesses(), tmp_path / "faults.jsonl")
    runner.run([FaultWindow("blip", 0.0, 0.1, ProxyDownFault("redis"))])
    assert runner.report().ok and runner.failure is None
    runner.report().raise_for_failure()


class SlowCrashPoints:
    """Crash points whose `slow` point takes `seconds` for every arming and disarming
    (an app whose workers are being replaced); calls in order, from any thread."""

    def __init__(self, slow: str, seconds: float) -> None:
        self.slow, self.seconds = slow, seconds
        self.calls: list[tuple[str, str]] = []
        self.armed: dict[str, Arming] = {}

    def point(self, name: str) -> CrashPointInfo:
        return CrashPointInfo(name=name, layer="api", process="app", description=name, actions=("crash",),
                              armed=self.armed.get(name), hits=0)

    def arm(self, name: str, arming: Arming) -> CrashPointInfo:
        if name == self.slow:
            time.sleep(self.seconds)
        self.calls.append(("arm", name))
        self.armed[name] = arming
        return self.point(name)

    def disarm(self, name: str) -> CrashPointInfo:
        if name == self.slow:
            time.sleep(self.seconds)
        self.calls.append(("disarm", name))
        self.armed.pop(name, None)
        return self.point(name)

    def hits(self) -> list[CrashPointHit]:
        return []


def test_a_slow_crash_point_delays_only_its_own_windows(tmp_path: Path) -> None:
    crash = Arming("crash", 0.5, 2)
    windows = [
        FaultWindow("slow-error", 0.0, 0.2, CrashPointFault("api.after_domain", Arming("error"))),  # 1 s + 1 s
        FaultWindow("slow-crash", 0.3, 0.1, CrashPointFault("api.after_domain", crash)),
        FaultWindow("other-crash", 0.1, 0.2, CrashPointFault("api.after_store", crash)),
        FaultWindow("pause-c1", 0.2, 0.2, ProcessFault("pause", "consumer-1")),
        FaultWindow("redis-down", 0.5, 0.2, ProxyDownFault("redis")),
    ]
    points, processes, network = SlowCrashPoints("api.after_domain", 1.0), FakeProcesses(), FakeNetwork()
    log = tmp_path / "faults.jsonl"
    runner = NemesisRunner(network, processes, log, crash_points=points)
    began = time.time()
    runner.run(windows)

    assert runner.report().ok, runner.report().summary()
    lines = {line["name"]: line for line in _log(log)}
    # the other windows kept their clock while the slow point's calls took seconds
    for name, planned in (("other-crash", 0.1), ("pause-c1", 0.2), ("redis-down", 0.5)):
        assert lines[name]["start"] - began < planned + 0.6, (name, lines[name])
    # one crash point's windows stay in their order: disarmed before it was armed again
    assert [call for call in points.calls if call[1] == "api.after_domain"] == \
        [("arm", "api.after_domain"), ("disarm", "api.after_domain")] * 2
    assert lines["slow-crash"]["start"] >= lines["slow-error"]["end"]


def test_network_and_process_faults_keep_the_plans_order(tmp_path: Path) -> None:
    """A service started again needs its dependencies: a proxy's window after a kill
    waits for the kill's heal (the restart), however long it takes."""
    windows = [
        FaultWindow("kill-service", 0.0, 0.1, ProcessFault("kill", "service")),
        FaultWindow("deps-down", 0.2, 0.2, ProxyDownFault("dependencies")),
    ]
    processes, network = SlowProcesses("service", 0.6), FakeNetwork()
    log = tmp_path / "faults.jsonl"
    runner = NemesisRunner(network, processes, log)
    runner.run(windows)

    assert runner.report().ok, runner.report().summary()
    lines = {line["name"]: line for line in _log(log)}
    assert lines["deps-down"]["start"] >= lines["kill-service"]["end"]
    assert processes.calls == [("kill", "service"), ("start", "service")]


class SlowProcesses(FakeProcesses):
    """Processes whose `slow` service takes `seconds` for every action (a service that
    takes long to start)."""

    def __init__(self, slow: str, seconds: float) -> None:
        super().__init__()
        self.slow, self.seconds = slow, seconds

    def _act(self, action: str, service: str) -> None:
        if service == self.slow:
            time.sleep(self.seconds)
        super()._act(action, service)
