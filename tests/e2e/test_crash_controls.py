"""The correct app passes the very plan that arms each crash control's points
(harness.catalog.CONTROL_CRASH_POINTS), with no widened window (no
TARGET_APP_HANDLER_DELAY_MS), and the points fire: the false-alarm side of those
controls. That each control is caught by its own invariant under its points, with the
points fired, is proved by the smoke job's cells (tests/e2e/test_smoke.py), which run
the same controls against the same scenarios; it is not run a second time here. Each
case is one short `harness run` on its own stack."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from e2e_helpers import harness

from harness.catalog import CONTROL_CRASH_ACTIONS, CONTROL_CRASH_POINTS
from harness.run.smoke import MUTANT_CASES

# The scenario that exercises each crash control's rule: the one its smoke cell runs.
SCENARIOS: dict[str, str] = {case.mutant: case.scenario for case in MUTANT_CASES
                             if case.mutant in CONTROL_CRASH_POINTS}
# A reclaim soon after a crashed consumer, so the run's drain sees every redelivery.
APP_ENV = {"TARGET_APP_RECLAIM_IDLE_MS": "1000"}


def plan_for(control: str, path: Path) -> Path:
    action = CONTROL_CRASH_ACTIONS.get(control, "crash")
    windows = [{"at": "1s", "for": "5s", "name": f"{control}-{point.replace('.', '-')}", "crash_point": point,
                "action": action, "probability": 0.4, "count": 20}
               for point in CONTROL_CRASH_POINTS[control]]
    path.write_text(yaml.safe_dump({"seed": 18, "windows": windows}))
    return path


def run(tmp_path: Path, control: str) -> dict:
    """One `harness run` of the correct app under `control`'s plan."""
    scenario = SCENARIOS[control]
    runs = tmp_path / "runs"
    args = ["run", scenario, "--plan", str(plan_for(control, tmp_path / "plan.yaml")), "--users", "4",
            "--duration", "8s", "--app-workers", "2", "--consumers", "2", "--runs-dir", str(runs),
            "--root", str(tmp_path / "stack"), "--json"]
    result = harness(*args, cwd=tmp_path, env=APP_ENV, timeout=300)
    assert runs.is_dir(), result.stdout[-2000:] + result.stderr[-3000:]
    (run_dir,) = [path for path in runs.iterdir() if path.is_dir()]
    document = json.loads((run_dir / "result.json").read_text())
    faults = [json.loads(line) for line in (run_dir / "faults.jsonl").read_text().splitlines()]
    return {"code": result.code, "result": document, "faults": faults,
            "output": result.stdout[-2000:] + result.stderr[-3000:]}


def test_every_control_of_a_crash_has_a_case() -> None:
    # The smoke job's cells, which prove each control caught, run these very cases.
    assert set(SCENARIOS) == set(CONTROL_CRASH_POINTS)
    assert set(CONTROL_CRASH_ACTIONS) <= set(CONTROL_CRASH_POINTS)


@pytest.mark.slow
@pytest.mark.parametrize("control", sorted(SCENARIOS))
def test_the_correct_app_passes_with_the_same_points_armed(tmp_path: Path, control: str) -> None:
    outcome = run(tmp_path, control)
    assert outcome["code"] == 0, outcome["output"]
    assert outcome["result"]["verdict"] == "pass"
    assert sum(fault.get("hits") or 0 for fault in outcome["faults"]) > 0, outcome["faults"]
