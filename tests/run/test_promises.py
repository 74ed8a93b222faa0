"""What a run promises to exercise: the scenario's paths plus its plan's `promises`,
and how the smoke job judges a step (a control must fail by its own invariant)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.catalog import SCENARIO_PROMISES
from harness.check.checker import CheckResult, InvariantResult
from harness.exit_codes import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_VIOLATION
from harness.nemesis.plans import PlanError, load_plan, parse_plan
from harness.run.runner import RunOutcome, promised_paths
from harness.run.smoke import SmokeStep

PLANS = Path(__file__).resolve().parents[2] / "harness" / "plans"
WINDOW = {"at": "1s", "for": "1s", "proxy_down": "redis"}


def test_a_plan_adds_its_promises_to_the_scenarios() -> None:
    plan = parse_plan({"seed": 1, "windows": [WINDOW], "promises": ["recovery_point", "replay"]})
    assert plan.promises == ("recovery_point", "replay")
    promised = promised_paths("timeout_replay", plan)
    assert promised[:len(SCENARIO_PROMISES["timeout_replay"])] == list(SCENARIO_PROMISES["timeout_replay"])
    assert promised.count("replay") == 1 and "recovery_point" in promised


def test_an_unknown_promise_is_a_plan_error_that_names_the_field() -> None:
    with pytest.raises(PlanError, match="promises.*unknown path.*teleport"):
        parse_plan({"seed": 1, "windows": [WINDOW], "promises": ["teleport"]})
    with pytest.raises(PlanError, match="promises"):
        parse_plan({"seed": 1, "windows": [WINDOW], "promises": "replay"})


def test_every_shipped_plan_parses_with_known_promises() -> None:
    for path in sorted(PLANS.glob("*.yaml")):
        if path.stem.startswith("probe-") or path.stem == "every-step":
            continue  # a probe's targets, not a stack's: tests/probe/test_service_plan.py
        load_plan(path)  # raises PlanError on an unknown promise


def _step(exit_code: int, failed: list[str], *, expect_violation: bool, invariant: str | None) -> SmokeStep:
    invariants = [InvariantResult(name, name, False, 1, 1) for name in failed]
    check = CheckResult(valid=not failed, invariants=[*invariants, InvariantResult("other", "Other", True, 1, 0)])
    outcome = RunOutcome(Path("."), exit_code, "", check=check)
    return SmokeStep("label", expect_violation, outcome, None, invariant)


def test_a_control_passes_the_smoke_only_when_its_own_invariant_caught_it() -> None:
    assert _step(EXIT_VIOLATION, ["tenant_isolation"], expect_violation=True, invariant="tenant_isolation").passed
    assert not _step(EXIT_VIOLATION, ["one_order_per_key"], expect_violation=True,
                     invariant="tenant_isolation").passed
    assert not _step(EXIT_OK, [], expect_violation=True, invariant="tenant_isolation").passed


def test_a_correct_run_must_be_conclusive() -> None:
    assert _step(EXIT_OK, [], expect_violation=False, invariant=None).passed
    assert not _step(EXIT_INCONCLUSIVE, [], expect_violation=False, invariant=None).passed


def test_the_runs_seed_moves_the_random_faults_but_not_the_fixed_windows() -> None:
    from harness.nemesis.plans import schedule

    plan = load_plan(PLANS / "chaos.yaml")
    first = schedule(plan, 30.0, run_seed=1)
    assert first == schedule(plan, 30.0, run_seed=1)  # same seed, same schedule
    assert first != schedule(plan, 30.0, run_seed=2)
    fixed = load_plan(PLANS / "redis-kills.yaml")
    assert schedule(fixed, 8.0, run_seed=1) == schedule(fixed, 8.0, run_seed=2) == schedule(fixed, 8.0)
