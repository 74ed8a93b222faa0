"""The harness's own list of negative controls agrees with the app's, and every
control has a smoke case that names the invariant that must catch it."""

from __future__ import annotations

from harness.catalog import MUTANTS, PATHS, SCENARIO_PROMISES, SCENARIOS
from harness.check.checker import check
from harness.run.smoke import MUTANT_CASES
from target_app.settings import UNSAFE_LAYERS


def test_the_harness_knows_exactly_the_apps_negative_controls() -> None:
    assert set(MUTANTS) == set(UNSAFE_LAYERS)


def test_every_control_has_one_smoke_case_with_a_known_invariant() -> None:
    names = {inv.name for inv in check([], []).invariants}
    assert sorted(case.mutant for case in MUTANT_CASES) == sorted(MUTANTS)
    for case in MUTANT_CASES:
        assert case.scenario in SCENARIOS
        assert case.invariant in names, case


def test_scenario_promises_name_known_paths() -> None:
    assert set(SCENARIO_PROMISES) == set(SCENARIOS)
    for promised in SCENARIO_PROMISES.values():
        assert promised and set(promised) <= set(PATHS)
