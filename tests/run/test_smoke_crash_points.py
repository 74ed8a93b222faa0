"""The smoke job's crash-point cells, without running them: every control a failure
between two steps breaks runs under a plan that arms exactly its crash points to the
end of the load, and the bundled `crash-points` plan visits every crash point early,
without two windows on one request path at once (tests/e2e/test_smoke.py runs them)."""

from __future__ import annotations

from pathlib import Path

from harness import bundled
from harness.catalog import CONTROL_CRASH_ACTIONS, CONTROL_CRASH_POINTS, CRASH_POINTS, MUTANTS
from harness.nemesis.faults import CrashPointFault
from harness.nemesis.plans import FaultWindow, load_plan, schedule
from harness.run.runner import RunSpec
from harness.run.smoke import (
    CONTROL_PLANS_DIR,
    EXTRA_CORRECT_RUNS,
    MUTANT_CASES,
    control_plan,
    smoke_specs,
)

SMOKE_SECONDS = 8.0  # `harness smoke`'s default duration


def _crash_point(window: FaultWindow) -> CrashPointFault:
    assert isinstance(window.fault, CrashPointFault), window
    return window.fault


def test_each_crash_point_control_arms_exactly_its_points_to_the_end(tmp_path: Path) -> None:
    assert set(CONTROL_CRASH_POINTS) <= set(MUTANTS)
    steps = {label: spec for label, spec, _, _ in smoke_specs(RunSpec(scenario="mixed", runs_root=tmp_path))}
    for case in MUTANT_CASES:
        if case.mutant not in CONTROL_CRASH_POINTS:
            continue
        assert case.plan is None, case  # its own plan, not a random one
        spec = steps[f"mutant {case.mutant} / {case.scenario}"]
        assert spec.plan == tmp_path / CONTROL_PLANS_DIR / f"{case.mutant}.yaml"
        windows = schedule(load_plan(spec.plan), SMOKE_SECONDS)
        armed = [_crash_point(window) for window in windows]
        assert [fault.point for fault in armed] == list(CONTROL_CRASH_POINTS[case.mutant])
        for window, fault in zip(windows, armed, strict=True):
            assert fault.arming.action == CONTROL_CRASH_ACTIONS.get(case.mutant, "crash")
            assert 0 < fault.arming.probability <= 1 and fault.arming.count
            # from early on until the end of the load (the runner holds it until the load stopped)
            assert window.at < 1.0 and window.end >= SMOKE_SECONDS
    assert control_plan("inbox-nonatomic")["windows"][0]["crash_point"] == "consumer.after_effect"


def test_the_correct_app_runs_crash_points_for_the_api_and_the_message_layers() -> None:
    assert ("timeout_replay", "crash-points") in EXTRA_CORRECT_RUNS
    assert ("redelivered_messages", "crash-points") in EXTRA_CORRECT_RUNS


def test_the_crash_points_plan_visits_every_point_early_one_at_a_time_per_path() -> None:
    plan = load_plan(bundled.plan_path("crash-points"))
    assert plan.promises
    windows = schedule(plan, SMOKE_SECONDS)
    assert len(windows) == len(plan.windows)  # none dropped or cut by a smoke run
    visited = {_crash_point(window).point for window in windows}
    assert visited == set(CRASH_POINTS)
    assert all(window.end <= SMOKE_SECONDS for window in windows)
    # Points on one request path: a crash at one hides those after it, so their
    # windows never overlap (webhooks carry no Idempotency-Key: no API point on theirs).
    paths = {
        "api request": {name for name in CRASH_POINTS if name.split(".")[0] in ("api", "domain")},
        "webhook": {"webhook.after_verify", "webhook.after_apply", "domain.after_guard"},
        "consumer": {name for name, (_, process) in CRASH_POINTS.items() if process == "consumer"},
    }
    for path, points in paths.items():
        on_path = sorted((w for w in windows if _crash_point(w).point in points), key=lambda w: w.at)
        for earlier, later in zip(on_path, on_path[1:], strict=False):
            assert earlier.end <= later.at, (path, earlier.name, later.name)
    for window in windows:
        arming = _crash_point(window).arming
        assert arming.count is not None and arming.count >= 2, window.name  # bounded, and hit several times
