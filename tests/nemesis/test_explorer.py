"""The explorer (harness.nemesis.explorer) against a fake StepSource: the seeded
crash order, every step crashed before and after, a step that never fires named
in the inconclusive reasons, start-up steps, violations put on crashes; and the
plan's `explore:` key, parsed with errors naming the field."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import pytest

from harness.nemesis.explorer import (
    CrashRecord,
    ExploreError,
    ExploreSpec,
    attribute,
    crash_order,
    explore,
)
from harness.nemesis.plans import PlanError, parse_plan
from harness.probe.plan_targets import ProbeTargets, parse_probe_plan

STEPS = ("db BEGIN - service", "db INSERT payments service", "db COMMIT - service", "db SELECT - service")
FAST = ExploreSpec(learn=0.01, wait=0.05, settle=0.0, budget=30.0)


class FakeSource:
    """Steps seen at once; a trigger fires as soon as it is armed, unless its step
    is in `never` (then it waits, and disarming takes it back)."""

    def __init__(self, steps: tuple[str, ...] = STEPS, never: tuple[str, ...] = ()) -> None:
        self.counts = dict.fromkeys(steps, 1)
        self.never = never
        self.armed: list[tuple[str, str]] = []
        self.clock = itertools.count(1000)

    def steps(self) -> Mapping[str, int]:
        return dict(self.counts)

    def arm(self, action: str, step: str) -> object:
        self.armed.append((action, step))
        return len(self.armed) - 1

    def fired(self, armed: object) -> Mapping[str, Any] | None:
        assert isinstance(armed, int)
        action, step = self.armed[armed]
        if step in self.never:
            return None
        return {"step": step, "action": action, "pid": 42, "at_us": next(self.clock) * 1_000_000, "verified": True}

    def disarm(self, armed: object) -> bool:
        return True


def test_the_same_seed_explores_the_same_crash_states_and_another_seed_another_order() -> None:
    runs = []
    for _ in range(2):
        source = FakeSource()
        explore(source, FAST, 11, lambda record: None)
        runs.append(source.armed)
    assert runs[0] == runs[1]
    assert len(runs[0]) == len(STEPS) * 2
    orders = {tuple(crash_order(STEPS, FAST, seed)) for seed in range(1, 6)}
    assert len(orders) > 1
    # The source's order of steps never changes the schedule: they are sorted first.
    assert crash_order(STEPS, FAST, 3) == crash_order(tuple(reversed(STEPS)), FAST, 3)


def test_every_step_is_crashed_before_and_after_and_each_crash_recovered() -> None:
    recovered: list[CrashRecord] = []
    result = explore(FakeSource(), ExploreSpec(learn=0.01, wait=0.05, settle=0.0, each=2), 5, recovered.append)
    rows = {row.step: row for row in result.table()}
    assert set(rows) == set(STEPS)
    assert all(row.crashed == {"before": 2, "after": 2} for row in rows.values())
    assert len(recovered) == len(STEPS) * 2 * 2
    assert result.reasons() == []
    assert all(crash.outcome == "crashed" and crash.fired_at is not None for crash in result.crashes)


def test_a_step_never_crashable_makes_the_run_inconclusive_naming_it() -> None:
    result = explore(FakeSource(never=("db COMMIT - service",)), FAST, 5, lambda record: None)
    reasons = result.reasons()
    assert len(reasons) == 1
    assert "'db COMMIT - service'" in reasons[0] and "before or after" in reasons[0]
    row = {row.step: row for row in result.table()}["db COMMIT - service"]
    assert row.crashed == {"before": 0, "after": 0}
    assert row.attempts == 4  # each action armed, not met, tried once more


def test_a_budget_too_short_names_the_steps_it_left() -> None:
    spec = ExploreSpec(learn=0.01, wait=0.05, settle=0.0, budget=0.01)
    result = explore(FakeSource(never=STEPS), spec, 5, lambda record: None)
    assert result.stopped_early
    assert len(result.reasons()) == len(STEPS)


def test_listed_steps_are_crashed_alone_and_one_no_process_sends_is_an_error() -> None:
    source = FakeSource()
    result = explore(source, ExploreSpec(steps=("db INSERT *",), learn=0.01, wait=0.05, settle=0.0), 1,
                     lambda record: None)
    assert {step for _, step in source.armed} == {"db INSERT payments service"}
    assert result.reasons() == []
    with pytest.raises(ExploreError, match=r"explore.steps\[1\]: no process sends step 'redis SET \* app'"):
        explore(FakeSource(), ExploreSpec(steps=("db BEGIN *", "redis SET * app"), learn=0.01), 1,
                lambda record: None)


def test_steps_seen_only_while_the_service_restarts_are_start_up_steps() -> None:
    source = FakeSource()

    def restart(record: CrashRecord) -> None:
        source.counts["db CREATE payments service"] = source.counts.get("db CREATE payments service", 0) + 1

    result = explore(source, FAST, 2, restart)
    assert result.startup == ("db CREATE payments service",)
    assert result.reasons() == []
    assert {row.step: row.startup for row in result.table()}["db CREATE payments service"] is True


def test_a_violation_is_put_on_the_crash_its_keys_were_in_flight_at() -> None:
    result = explore(FakeSource(), FAST, 2, lambda record: None)
    crash = result.crashes[0]
    assert crash.fired_at is not None
    at = crash.fired_at
    operations = [
        {"idempotency_key": "k1", "invoke_time": at - 0.5, "complete_time": at + 0.1, "type": "info"},
        {"idempotency_key": "k2", "invoke_time": at - 2.0, "complete_time": at - 1.5, "type": "ok"},
        # A client timeout a little before the crash: the server may still have worked on it.
        {"idempotency_key": "k3", "invoke_time": at - 1.2, "complete_time": at - 0.2, "type": "info"},
    ]
    violations = [{"invariant": "one_effect_per_key", "evidence": {"requests": [{"idempotency_key": "k1"}]}},
                  {"invariant": "one_resource_per_key", "evidence": {"key": "k2"}},
                  {"invariant": "replay_fidelity", "evidence": {"operation": {"idempotency_key": "k3"}}}]
    placed = attribute(result, violations, operations, grace=1.0)
    assert [bool(item["crashes"]) for item in placed] == [True, False, True]
    assert placed[0]["crashes"][0]["step"] == crash.step
    assert result.failed[crash.step] == {"one_effect_per_key": 1, "replay_fidelity": 1}


# --- the plan's `explore:` ------------------------------------------------------------

@pytest.mark.parametrize(("explore_raw", "words"), [
    ({"steps": "all"}, "explore.steps: must be `every` or a list"),
    ({"steps": []}, "explore.steps: must be `every` or a list"),
    ({"actions": ["crash"]}, "explore.actions[0]: must be one of before, after, pause, error, not 'crash'"),
    ({"actions": []}, "explore.actions: must be a non-empty list"),
    ({"learn": "0s"}, "explore.learn: must be longer than 0s"),
    ({"budget": "soon"}, "explore.budget:"),
    ({"each": 0}, "explore.each: must be an integer >= 1, not 0"),
    ({"colour": 1}, "explore: unknown key(s) colour"),
])
def test_explore_errors_name_the_field(explore_raw: dict[str, Any], words: str) -> None:
    with pytest.raises(PlanError) as error:
        parse_plan({"seed": 1, "explore": explore_raw}, source="p.yaml",
                   targets=PROBE_PARSE_TARGETS)
    assert f"p.yaml: {words}" in str(error.value)


def test_explore_parses_with_its_defaults() -> None:
    plan = parse_plan({"seed": 1, "explore": {"steps": ["db COMMIT - service"], "learn": "1s"}},
                      targets=PROBE_PARSE_TARGETS)
    assert plan.explore == ExploreSpec(steps=("db COMMIT - service",), learn=1.0)
    assert parse_plan({"seed": 1, "explore": {}}, targets=PROBE_PARSE_TARGETS).explore == ExploreSpec()


def test_a_stack_plan_refuses_explore() -> None:
    with pytest.raises(PlanError, match="explore: only `harness probe` explores"):
        parse_plan({"seed": 1, "explore": {}}, source="p.yaml")


@pytest.mark.parametrize(("targets", "words"), [
    (ProbeTargets.plain(("db",)), "need a service the probe runs"),
    (ProbeTargets.plain((), service=True), "need `dependencies:`"),
    (ProbeTargets.plain(("db", "cache"), service=True, protocols={"db": "postgres"}),
     "dependency 'cache' has no protocol: give dependencies.cache: {address: ..., protocol: redis|postgres}"),
])
def test_a_probe_explores_only_a_service_it_runs_with_each_dependency_s_protocol(
        targets: ProbeTargets, words: str) -> None:
    with pytest.raises(PlanError) as error:
        parse_probe_plan({"seed": 1, "explore": {}}, source="p.yaml", targets=targets)
    assert str(error.value).startswith("p.yaml: explore: ") and words in str(error.value)
    ok = ProbeTargets.plain(("db",), service=True, protocols={"db": "postgres"})
    assert parse_probe_plan({"seed": 1, "explore": {}}, source="p.yaml", targets=ok).explore is not None


def _probe_parse_targets() -> Any:
    from harness.nemesis.plans import PlanTargets

    return PlanTargets(proxies=(), services=(), explore=True)


PROBE_PARSE_TARGETS = _probe_parse_targets()


def test_a_crash_that_fired_without_verifying_is_recovered_and_tried_once_more() -> None:
    class FlakySource(FakeSource):
        def __init__(self) -> None:
            super().__init__()
            self.failed_once = False

        def fired(self, armed: object) -> Mapping[str, Any] | None:
            record = dict(super().fired(armed) or {})
            if record["step"] == "db COMMIT - service" and not self.failed_once:
                self.failed_once = True
                record["verified"] = False
            return record

    recovered: list[CrashRecord] = []
    result = explore(FlakySource(), FAST, 4, recovered.append)
    commit = [crash for crash in result.crashes if crash.step == "db COMMIT - service"]
    assert [crash.outcome for crash in commit].count("unverified") == 1 and len(commit) == 3
    assert len(recovered) == len(STEPS) * 2 + 1
    assert result.reasons() == []
