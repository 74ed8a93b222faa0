"""The harness's own list of negative controls agrees with the app's, and every
control has a smoke case that names the invariant that must catch it, but those the
catalog exempts with a reason (SMOKE_EXEMPT)."""

from __future__ import annotations

from pathlib import Path

from harness.catalog import MUTANTS, PATHS, SCENARIO_PROMISES, SCENARIOS, SMOKE_EXEMPT
from harness.check.checker import check
from harness.run.smoke import MUTANT_CASES
from target_app.settings import UNSAFE_LAYERS


def test_the_harness_knows_exactly_the_apps_negative_controls() -> None:
    assert set(MUTANTS) == set(UNSAFE_LAYERS)


def test_every_control_has_one_smoke_case_with_a_known_invariant() -> None:
    names = {inv.name for inv in check([], []).invariants}
    assert sorted(case.mutant for case in MUTANT_CASES) == sorted(set(MUTANTS) - set(SMOKE_EXEMPT))
    for case in MUTANT_CASES:
        assert case.scenario in SCENARIOS
        assert case.invariant in names, case


def test_scenario_promises_name_known_paths() -> None:
    assert set(SCENARIO_PROMISES) == set(SCENARIOS)
    for promised in SCENARIO_PROMISES.values():
        assert promised and set(promised) <= set(PATHS)


def test_a_control_without_a_smoke_cell_says_why_and_where_it_is_caught() -> None:
    root = Path(__file__).resolve().parents[1]
    assert set(SMOKE_EXEMPT) <= set(MUTANTS)
    for control, reason in SMOKE_EXEMPT.items():
        tests = [word for word in reason.split() if word.startswith("tests/") and word.endswith(".py")]
        assert tests and all((root / path).is_file() for path in tests), (control, reason)
        assert control in (root / tests[0]).read_text(), (control, tests[0])
