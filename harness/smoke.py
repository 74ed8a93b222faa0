"""`harness smoke` and `harness matrix`: proof that the checker can fail.

The smoke job runs every scenario under its plan against the correct app (all must
pass), then each negative control against the one scenario that must catch it
(all must fail). The matrix runs every mutant against every scenario and shows
which scenario catches which missing layer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from harness.catalog import MUTANTS, SCENARIOS
from harness.errors import HarnessError
from harness.report import MatrixCell, format_matrix_table, write_matrix_report
from harness.runner import EXIT_OK, EXIT_VIOLATION, RunOutcome, RunSpec, run

PLANS_DIR = Path(__file__).resolve().parent.parent / "plans"

# The plan each scenario runs under in the smoke job: the duplicate source it targets.
SCENARIO_PLANS: dict[str, str | None] = {
    "timeout_replay": "flaky-network",
    "duplicate_webhooks": "redis-brownout",
    "redelivered_messages": "consumer-crashes",
    "mixed": "chaos",
}

# A slower message handler widens the check-then-act window of the naive inbox, so
# the reclaim after a paused consumer reliably races it. Kept short (and the users
# few) so two consumers still drain the stream within the bounded wait.
HANDLER_DELAY_ENV = {"TARGET_APP_HANDLER_DELAY_MS": "50", "TARGET_APP_RECLAIM_IDLE_MS": "1000"}
HANDLER_DELAY_USERS = 2


@dataclass(frozen=True)
class MutantCase:
    """The scenario (and plan) that must catch one missing layer."""

    mutant: str
    scenario: str
    plan: str | None
    app_env: dict[str, str]
    users: int | None = None


MUTANT_CASES = (
    MutantCase("api", "timeout_replay", None, {}),
    MutantCase("domain", "duplicate_webhooks", None, {}),
    MutantCase("inbox", "redelivered_messages", None, {}),
    MutantCase("inbox-nonatomic", "redelivered_messages", "consumer-crashes", HANDLER_DELAY_ENV,
               users=HANDLER_DELAY_USERS),
)


def plan_path(name: str | None) -> Path | None:
    return None if name is None else PLANS_DIR / f"{name}.yaml"


@dataclass
class SmokeStep:
    label: str
    expect_violation: bool
    outcome: RunOutcome | None
    error: str | None

    @property
    def passed(self) -> bool:
        if self.outcome is None:
            return False
        wanted = EXIT_VIOLATION if self.expect_violation else EXIT_OK
        return self.outcome.exit_code == wanted


def smoke(base: RunSpec, *, out: TextIO = sys.stderr) -> list[SmokeStep]:
    """Run the smoke job; `base` carries users, duration, seed and the runs root."""
    steps: list[SmokeStep] = []
    for scenario in SCENARIOS:
        spec = replace(base, scenario=scenario, plan=plan_path(SCENARIO_PLANS[scenario]),
                       unsafe_disable=(), app_env=dict(base.app_env))
        steps.append(_step(f"correct app / {scenario}", spec, expect_violation=False, out=out))
    for case in MUTANT_CASES:
        spec = replace(base, scenario=case.scenario, plan=plan_path(case.plan),
                       unsafe_disable=(case.mutant,), app_env={**base.app_env, **case.app_env},
                       users=min(base.users, case.users or base.users))
        steps.append(_step(f"mutant {case.mutant} / {case.scenario}", spec, expect_violation=True, out=out))
    return steps


def _step(label: str, spec: RunSpec, *, expect_violation: bool, out: TextIO) -> SmokeStep:
    print(f"harness smoke: {label} ...", file=out, flush=True)
    try:
        outcome = run(spec, out=out)
    except HarnessError as error:
        print(f"harness smoke: {label}: harness failure: {error}", file=out, flush=True)
        return SmokeStep(label, expect_violation, None, str(error))
    step = SmokeStep(label, expect_violation, outcome, None)
    verdict = "ok" if step.passed else ("NOT CAUGHT" if expect_violation else "FAILED")
    print(f"harness smoke: {label}: {verdict}: {outcome.summary}", file=out, flush=True)
    return step


def smoke_exit_code(steps: Sequence[SmokeStep]) -> int:
    if any(step.outcome is None for step in steps):
        return 2
    return EXIT_OK if all(step.passed for step in steps) else EXIT_VIOLATION


def matrix(
    base: RunSpec,
    *,
    mutants: Sequence[str] = ("none", *MUTANTS),
    scenarios: Sequence[str] = SCENARIOS,
    out: TextIO = sys.stderr,
    on_cell: Callable[[MatrixCell], None] | None = None,
) -> list[MatrixCell]:
    """Every mutant (`none` = the correct app) against every scenario, with no plan
    except where a layer can only be caught under its fault (the naive inbox)."""
    for mutant in mutants:
        if mutant != "none" and mutant not in MUTANTS:
            raise HarnessError(f"unknown mutant {mutant!r}; choose from none, {', '.join(MUTANTS)}")
    for scenario in scenarios:
        if scenario not in SCENARIOS:
            raise HarnessError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
    cells: list[MatrixCell] = []
    for mutant in mutants:
        for scenario in scenarios:
            slow_handler = mutant == "inbox-nonatomic"
            case_env = HANDLER_DELAY_ENV if slow_handler else {}
            plan = "consumer-crashes" if mutant == "inbox-nonatomic" and scenario in (
                "redelivered_messages", "mixed") else None
            spec = replace(
                base, scenario=scenario, plan=plan_path(plan),
                unsafe_disable=() if mutant == "none" else (mutant,),
                app_env={**base.app_env, **case_env},
                users=min(base.users, HANDLER_DELAY_USERS) if slow_handler else base.users,
            )
            print(f"harness matrix: {mutant} × {scenario} ...", file=out, flush=True)
            try:
                outcome = run(spec, out=out)
            except HarnessError as error:
                cell = MatrixCell(mutant, scenario, False, [], "", str(error))
            else:
                result = outcome.result or {}
                failed = [inv["name"] for inv in result.get("invariants", []) if not inv.get("passed")]
                cell = MatrixCell(mutant, scenario, bool(failed), failed, str(outcome.run_dir))
            cells.append(cell)
            if on_cell is not None:
                on_cell(cell)
    return cells


def matrix_exit_code(cells: Sequence[MatrixCell]) -> int:
    """0 when the correct app passes everywhere and every mutant is caught somewhere."""
    if any(cell.error for cell in cells):
        return 2
    false_alarms = [c for c in cells if c.mutant == "none" and c.caught]
    missed = {c.mutant for c in cells if c.mutant != "none"} - {
        c.mutant for c in cells if c.mutant != "none" and c.caught
    }
    return EXIT_VIOLATION if false_alarms or missed else EXIT_OK


def write_matrix(cells: Sequence[MatrixCell], runs_root: Path) -> Path:
    path = Path(runs_root) / "matrix.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_matrix_report(path, cells)
    return path


__all__ = [
    "MUTANT_CASES", "SCENARIO_PLANS", "MutantCase", "SmokeStep", "format_matrix_table",
    "matrix", "matrix_exit_code", "smoke", "smoke_exit_code", "write_matrix",
]
