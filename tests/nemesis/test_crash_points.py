"""The crash-point fault: its client verifies every arming and disarming by reading the
app back, a plan names crash points (checked before any stack starts), the fault
applies, heals and records its window's hits, and the runner and a stack's reset
disarm them. The app's endpoints are a stand-in here (tests.support.crash_points);
tests/target_app tests the app's own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.catalog import CONTROL_CRASH_POINTS, CRASH_POINTS
from harness.nemesis.crash_points import Arming, CrashPointClient, CrashPointHit, armed_as_asked, check_arming
from harness.nemesis.faults import CrashPointFault, FaultTargets
from harness.nemesis.plans import FaultWindow, NemesisRunner, PlanError, parse_plan, schedule
from harness.nemesis.stack_proxies import StackNemesis
from harness.nemesis.toxiproxy_client import (
    Nemesis,
    NemesisError,
    NemesisHealError,
    NemesisInvalid,
    NemesisNotFound,
    NemesisUnreachable,
    NemesisVerifyError,
)
from harness.ports import free_port
from tests.support.crash_points import TOKEN, FakeCrashPoints, serving

POINT = "consumer.after_effect"


@pytest.fixture
def fake() -> FakeCrashPoints:
    return FakeCrashPoints()


@pytest.fixture
def client(fake: FakeCrashPoints) -> Iterator[CrashPointClient]:
    with serving(fake) as url:
        yield CrashPointClient(url, TOKEN, timeout=2.0)


class NoProcesses:
    def kill(self, service: str) -> None: raise AssertionError("no process faults here")
    def start(self, service: str) -> None: raise AssertionError("no process faults here")
    def pause(self, service: str) -> None: raise AssertionError("no process faults here")
    def resume(self, service: str) -> None: raise AssertionError("no process faults here")
    def restart(self, service: str) -> None: raise AssertionError("no process faults here")


class NoNetwork:
    def add_toxic(self, proxy: str, type: str, **kwargs: Any) -> object:  # noqa: A002
        raise AssertionError("no network faults here")
    def remove_toxic(self, proxy: str, name: str) -> None: raise AssertionError("no network faults here")
    def disable_proxy(self, name: str) -> None: raise AssertionError("no network faults here")
    def enable_proxy(self, name: str) -> None: raise AssertionError("no network faults here")


# --- the arming, checked before anything is sent ------------------------------------------

@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("explode",), "action must be one of crash, error, delay, drop-reply"),
        (("crash", 0), "probability must be a number in (0, 1]"),
        (("crash", 1.5), "probability must be a number in (0, 1]"),
        (("crash", True), "probability"),
        (("crash", float("nan")), "probability"),
        (("crash", 0.5, 0), "count must be an integer >= 1"),
        (("crash", 0.5, 2.5), "count must be an integer >= 1"),
        (("delay", 1.0, None, 0), "a delay needs delay_ms > 0"),
        (("delay", 1.0, None, -4), "delay_ms must be an integer >= 0"),
        (("crash", 1.0, None, 200), "delay_ms goes with the delay action only"),
    ],
)
def test_a_bad_arming_is_refused_with_one_line(args: tuple[Any, ...], words: str) -> None:
    with pytest.raises(NemesisInvalid) as caught:
        check_arming(*args)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_good_arming_keeps_its_values() -> None:
    assert check_arming("delay", 0.25, 3, 150) == Arming("delay", 0.25, 3, 150)
    assert check_arming("crash") == Arming("crash", 1.0, None, 0)
    assert Arming("crash", 0.3, 5).describe() == "crash probability=0.3 count=5"
    assert Arming("delay", 1.0, None, 200).describe() == "delay 200ms probability=1"


def test_a_read_back_matches_only_the_arming_asked_for() -> None:
    asked = Arming("crash", 0.3, 2)
    assert armed_as_asked(Arming("crash", 0.3, 2), asked, fired=0)
    assert not armed_as_asked(Arming("error", 0.3, 2), asked, fired=0)
    assert not armed_as_asked(Arming("crash", 0.5, 2), asked, fired=0)
    assert not armed_as_asked(Arming("crash", 0.3, None), asked, fired=0)
    assert not armed_as_asked(None, asked, fired=1)
    assert armed_as_asked(None, asked, fired=2)  # its count used up before the read
    assert not armed_as_asked(None, Arming("crash"), fired=50)


# --- the client against the endpoints --------------------------------------------------------

def test_arm_reads_back_and_disarm_turns_it_off(client: CrashPointClient, fake: FakeCrashPoints) -> None:
    point = client.arm(POINT, Arming("crash", 0.3, 4))
    assert point.armed == Arming("crash", 0.3, 4) and point.layer == "message"
    assert fake.armed[POINT]["probability"] == 0.3
    # one call: the PUT's answer is the app's read-back of the shared state
    assert fake.requests == [("PUT", f"/internal/v1/crash-points/{POINT}")]
    assert [p.name for p in client.armed()] == [POINT]
    fake.fire(POINT)
    off = client.disarm(POINT)
    assert off.armed is None and off.hits == 1
    assert client.armed() == []


@pytest.mark.parametrize("action", ["crash", "error", "delay", "drop-reply"])
def test_each_action_is_armed_as_asked(client: CrashPointClient, action: str) -> None:
    arming = check_arming(action, 0.5, None, 100 if action == "delay" else None)
    point = client.arm("api.after_store", arming)
    assert point.armed == arming
    client.disarm("api.after_store")


def test_an_action_the_point_does_not_take_is_refused(client: CrashPointClient,
                                                       fake: FakeCrashPoints) -> None:
    with pytest.raises(NemesisInvalid, match="takes crash, error, delay, not drop-reply"):
        client.arm("consumer.after_read", Arming("drop-reply"))
    assert fake.armed == {}


def test_an_unknown_point_names_the_known_ones(client: CrashPointClient) -> None:
    with pytest.raises(NemesisNotFound) as caught:
        client.arm("consumer.nowhere", Arming("crash"))
    assert "unknown crash point 'consumer.nowhere'" in str(caught.value)
    assert POINT in str(caught.value)


def test_an_arming_the_app_ignored_is_a_verify_error(client: CrashPointClient, fake: FakeCrashPoints) -> None:
    fake.ignore_arm = True
    with pytest.raises(NemesisVerifyError, match="reads back not armed"):
        client.arm(POINT, Arming("crash"))


def test_a_wrong_arming_is_taken_back(client: CrashPointClient, fake: FakeCrashPoints) -> None:
    fake.wrong_probability = True
    with pytest.raises(NemesisVerifyError, match="probability=0.01"):
        client.arm(POINT, Arming("crash", 0.5))
    assert POINT not in fake.armed  # disarmed again


def test_a_wrong_arming_that_cannot_be_taken_back_says_it_may_be_on(client: CrashPointClient,
                                                                    fake: FakeCrashPoints) -> None:
    fake.wrong_probability = True
    fake.ignore_disarm = True
    with pytest.raises(NemesisHealError) as caught:
        client.arm(POINT, Arming("crash", 0.5))
    assert caught.value.failures[0].what == f"crash point {POINT}"


def test_a_disarm_the_app_ignored_is_a_verify_error(client: CrashPointClient, fake: FakeCrashPoints) -> None:
    client.arm(POINT, Arming("error"))
    fake.ignore_disarm = True
    with pytest.raises(NemesisVerifyError, match="still reads back error"):
        client.disarm(POINT)


def test_disarm_all_lists_what_was_armed_and_what_is_left(client: CrashPointClient, fake: FakeCrashPoints) -> None:
    assert client.disarm_all() == []
    assert ("DELETE", "/internal/v1/crash-points") not in fake.requests  # nothing armed: nothing sent
    client.arm(POINT, Arming("crash"))
    client.arm("api.after_claim", Arming("error", 0.2))
    assert client.disarm_all() == ["api.after_claim", POINT]
    assert fake.armed == {}
    client.arm(POINT, Arming("crash"))
    fake.ignore_disarm = True
    with pytest.raises(NemesisHealError) as caught:
        client.disarm_all()
    assert [f.what for f in caught.value.failures] == [f"crash point {POINT}"]


def test_hits_come_back_typed_and_in_order(client: CrashPointClient, fake: FakeCrashPoints) -> None:
    client.arm(POINT, Arming("crash"))
    fake.fire(POINT, at=20.0)
    fake.fire(POINT, at=10.0)
    hits = client.hits()
    assert [(h.name, h.action, h.pid, h.at) for h in hits] == [(POINT, "crash", 4242, 10.0), (POINT, "crash", 4242, 20.0)]


def test_a_wrong_token_and_a_dead_app_are_nemesis_errors(fake: FakeCrashPoints) -> None:
    with serving(fake) as url:
        with pytest.raises(NemesisError, match="refused the internal token"):
            CrashPointClient(url, "wrong").points()
    dead = CrashPointClient(f"http://127.0.0.1:{free_port()}", TOKEN, timeout=0.5, retry_seconds=1.0)
    started = time.monotonic()
    with pytest.raises(NemesisUnreachable, match=r"did not answer \([2-9] attempts\)"):
        dead.points()
    assert time.monotonic() - started < 5  # bounded


def test_a_refused_connection_is_given_up_sooner_than_a_cut_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing listening (the app is gone, e.g. its stack stopped under the run) is tried
    only for REFUSED_RETRY_SECONDS, not the RETRY_SECONDS a crashing worker's cut call gets."""
    monkeypatch.setattr("harness.nemesis.crash_points.REFUSED_RETRY_SECONDS", 0.0)
    dead = CrashPointClient(f"http://127.0.0.1:{free_port()}", TOKEN, timeout=0.5, retry_seconds=30.0)
    with pytest.raises(NemesisUnreachable, match=r"did not answer \(1 attempts\)"):
        dead.points()


# --- plans ------------------------------------------------------------------------------------

def _plan(**window: Any) -> dict[str, Any]:
    return {"seed": 1, "windows": [{"at": "2s", "for": "6s", **window}]}


def test_a_plan_arms_a_crash_point_with_the_issues_syntax() -> None:
    plan = parse_plan(_plan(crash_point=POINT, action="crash", probability=0.3, count=7))
    (window,) = plan.windows
    assert window.fault == CrashPointFault(point=POINT, arming=Arming("crash", 0.3, 7))
    assert window.name == "w0-consumer-after_effect-crash" and (window.at, window.duration) == (2.0, 6.0)
    delay = parse_plan(_plan(crash_point="api.after_claim", action="delay", delay_ms=250)).windows[0].fault
    assert isinstance(delay, CrashPointFault) and delay.arming == Arming("delay", 1.0, None, 250)
    random_plan = parse_plan({"seed": 1, "random": {"every": "2s", "duration": "1s", "faults": [
        {"crash_point": POINT, "action": "error", "probability": 0.5}]}})
    windows = schedule(random_plan, 6.0)
    assert [w.name for w in windows] == ["r0-consumer-after_effect-error", "r1-consumer-after_effect-error",
                                         "r2-consumer-after_effect-error"]


@pytest.mark.parametrize(
    ("window", "field", "words"),
    [
        ({"crash_point": "consumer.nowhere", "action": "crash"}, "windows[0].crash_point",
         "unknown crash point 'consumer.nowhere' (known: api.after_claim"),
        ({"crash_point": POINT}, "windows[0]", "needs an action"),
        ({"crash_point": POINT, "action": "explode"}, "windows[0]", "action must be one of"),
        ({"crash_point": POINT, "action": "crash", "probability": 0}, "windows[0]", "probability"),
        ({"crash_point": POINT, "action": "crash", "count": -1}, "windows[0]", "count"),
        ({"crash_point": POINT, "action": "delay"}, "windows[0]", "delay_ms > 0"),
        ({"crash_point": 7, "action": "crash"}, "windows[0].crash_point", "must be a crash point's name"),
        ({"proxy_down": "redis", "probability": 0.5}, "windows[0]", "probability only go(es) with crash_point"),
        ({"crash_point": POINT, "action": "crash", "proxy_down": "redis"}, "windows[0]", "exactly one of"),
    ],
)
def test_bad_crash_point_windows_name_the_file_and_field(window: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(PlanError) as caught:
        parse_plan(_plan(**window), source="plans/x.yaml")
    assert str(caught.value).startswith(f"plans/x.yaml: {field}: "), str(caught.value)
    assert words in str(caught.value)


def test_the_plan_knows_every_crash_point_of_the_catalog() -> None:
    for name in CRASH_POINTS:
        parse_plan(_plan(crash_point=name, action="error"))
    for points in CONTROL_CRASH_POINTS.values():
        assert set(points) <= set(CRASH_POINTS)


# --- the fault, its record and the runner -----------------------------------------------------

def test_the_fault_applies_heals_and_counts_its_windows_hits(client: CrashPointClient,
                                                            fake: FakeCrashPoints) -> None:
    targets = FaultTargets(network=NoNetwork(), processes=NoProcesses(), crash_points=client)
    client.arm(POINT, Arming("crash"))
    fake.fire(POINT, at=time.time() - 100)  # a hit before the window: not the window's
    client.disarm(POINT)
    fault = CrashPointFault(point=POINT, arming=Arming("crash", 0.3, 9))
    fault.apply(targets, "w0")
    assert fake.armed[POINT] == {"action": "crash", "probability": 0.3, "count": 9, "delay_ms": 0}
    fake.fire(POINT)
    fake.fire(POINT)
    fault.heal(targets, "w0")
    assert POINT not in fake.armed
    record = fault.record("w0")
    assert record["kind"] == "crash_point" and record["target"] == POINT and record["action"] == "crash"
    assert (record["crash_point"], record["probability"], record["count"], record["delay_ms"]) == (POINT, 0.3, 9, 0)
    assert record["hits"] == 2
    hit_times = record["hit_times"]
    assert hit_times is not None and len(hit_times) == 2
    assert all(time.time() - 10 < at <= time.time() for at in hit_times)
    assert fault.describe() == f"crash probability=0.3 count=9 at crash point {POINT}"
    # a window that never got applied records no hits rather than zero
    assert fault.record("w9")["hits"] is None


def test_a_hit_logged_while_the_heal_disarms_is_counted_with_its_time(client: CrashPointClient,
                                                                     fake: FakeCrashPoints,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that fired just before the disarm may append its line just after it:
    the window's count and its times come from the same log read, so they agree."""
    targets = FaultTargets(network=NoNetwork(), processes=NoProcesses(), crash_points=client)
    fault = CrashPointFault(point=POINT, arming=Arming("crash"))
    fault.apply(targets, "w0")
    fired_at = time.time()
    fake.fire(POINT)
    read_hits = client.hits

    def hits_with_a_late_line() -> list[CrashPointHit]:
        with fake.lock:  # the line of a hit made while armed, written only now
            fake.hit_log.append({"name": POINT, "action": "crash", "process": "app", "pid": 4243, "at": fired_at})
        return read_hits()

    monkeypatch.setattr(client, "hits", hits_with_a_late_line)
    fault.heal(targets, "w0")
    record = fault.record("w0")
    assert record["hits"] == 2 and record["hit_times"] is not None and len(record["hit_times"]) == 2, record


def test_the_fault_fails_loudly_where_there_are_no_crash_points() -> None:
    fault = CrashPointFault(point=POINT, arming=Arming("crash"))
    with pytest.raises(NemesisError, match="no crash points to arm"):
        fault.apply(FaultTargets(network=NoNetwork(), processes=NoProcesses()), "w0")


def test_the_runner_arms_logs_and_disarms_a_crash_point(client: CrashPointClient, fake: FakeCrashPoints,
                                                        tmp_path: Path) -> None:
    log = tmp_path / "faults.jsonl"
    runner = NemesisRunner(NoNetwork(), NoProcesses(), log, crash_points=client)
    fault = CrashPointFault(point=POINT, arming=Arming("error", 0.5))
    runner.start([FaultWindow("w0-cp", 0.0, 0.4, fault)])
    deadline = time.monotonic() + 3
    while POINT not in fake.armed and time.monotonic() < deadline:
        time.sleep(0.01)
    fake.fire(POINT)
    runner.stop()
    assert runner.report().ok, runner.report().summary()
    assert fake.armed == {}
    (line,) = [orjson.loads(raw) for raw in log.read_bytes().splitlines()]
    assert line["name"] == "w0-cp" and line["kind"] == "crash_point" and line["error"] is None
    assert line["hits"] == 1 and len(line["hit_times"]) == 1 and line["start"] <= line["hit_times"][0] <= line["end"]


def test_a_crash_point_the_app_will_not_arm_stops_the_schedule(client: CrashPointClient, fake: FakeCrashPoints,
                                                               tmp_path: Path) -> None:
    fake.ignore_arm = True
    runner = NemesisRunner(NoNetwork(), NoProcesses(), tmp_path / "faults.jsonl", crash_points=client)
    runner.run([FaultWindow("w0", 0.0, 0.2, CrashPointFault(point=POINT, arming=Arming("crash")))])
    report = runner.report()
    assert not report.ok and report.failures[0].phase == "apply"
    assert "reads back not armed" in report.failures[0].error


def test_a_stacks_reset_disarms_its_crash_points_after_the_network(client: CrashPointClient,
                                                                   fake: FakeCrashPoints) -> None:
    from harness.toxiproxy.server import EmbeddedToxiproxy

    with EmbeddedToxiproxy() as toxiproxy:
        stack = StackNemesis(Nemesis(toxiproxy.url), crash_points=client)
        runner = NemesisRunner(stack, NoProcesses(), Path("/nonexistent/faults.jsonl"))
        assert runner.targets.crash_points is client  # a stack's nemesis brings its crash points
        client.arm(POINT, Arming("crash"))
        stack.reset()
        assert fake.armed == {}
        client.arm(POINT, Arming("crash"))
        fake.ignore_disarm = True
        with pytest.raises(NemesisHealError, match=f"crash point {POINT}"):
            stack.reset()
