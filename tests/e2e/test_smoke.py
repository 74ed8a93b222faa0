"""The smoke job end to end: the correct app passes every scenario under its plan,
and every negative control is caught by the invariant that guards its layer (but the
ones harness.catalog.SMOKE_EXEMPT exempts, each with a reason and its own test)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from e2e_helpers import SmokeRun, harness

from harness.catalog import CONTROL_CRASH_POINTS, CRASH_POINTS, MUTANTS, SCENARIOS, SMOKE_EXEMPT
from harness.run.smoke import EXTRA_CORRECT_RUNS, MUTANT_CASES

EXPECTED_CATCH = {case.mutant: case.invariant for case in MUTANT_CASES}


def _runs(smoke: SmokeRun) -> dict[str, Path]:
    """Run directories by the mutant they ran (`none` for the correct app) and scenario:
    a step's last run where it ran again with more load (its `-more-N` directories sort
    after its first)."""
    found: dict[str, Path] = {}
    for run_dir in sorted(smoke.runs.iterdir()):
        if not (run_dir / "settings.json").is_file():
            continue  # not a run (the control cells' plans)
        settings = json.loads((run_dir / "settings.json").read_text())
        mutant = "+".join(settings["unsafe_disable"]) or "none"
        plan = Path(settings["spec"]["plan"]).stem if settings["spec"].get("plan") else "no-plan"
        key = f"{mutant}/{settings['scenario']}/{plan}"
        assert key not in found or "-more-" in run_dir.name, (key, found.get(key), run_dir)
        found[key] = run_dir
    return found


def test_the_smoke_job_passes_and_catches_every_mutant(smoke_run: SmokeRun) -> None:
    assert smoke_run.result.code == 0, smoke_run.result.stdout + smoke_run.result.stderr[-3000:]
    lines = [line for line in smoke_run.result.stdout.splitlines() if line.startswith(("ok ", "FAIL"))]
    steps = len(SCENARIOS) + len(EXTRA_CORRECT_RUNS) + len(MUTANTS) - len(SMOKE_EXEMPT)
    assert len(lines) == steps and all(line.startswith("ok ") for line in lines), lines
    assert smoke_run.result.stdout.rstrip().endswith("smoke: PASS")


def test_each_mutant_fails_the_invariant_of_its_layer(smoke_run: SmokeRun) -> None:
    runs = _runs(smoke_run)
    assert set(EXPECTED_CATCH) == set(MUTANTS) - set(SMOKE_EXEMPT)  # each exempt one has a reason
    for mutant, invariant in EXPECTED_CATCH.items():
        (run_dir,) = [path for key, path in runs.items() if key.startswith(f"{mutant}/")]
        result = json.loads((run_dir / "result.json").read_text())
        failed = {inv["name"] for inv in result["invariants"] if not inv["passed"]}
        assert result["valid"] is False
        assert invariant in failed, (mutant, failed)


def test_correct_runs_hold_every_invariant_under_faults(smoke_run: SmokeRun) -> None:
    runs = {key: path for key, path in _runs(smoke_run).items() if key.startswith("none/")}
    assert len(runs) == len(SCENARIOS) + len(EXTRA_CORRECT_RUNS)
    kill_log = runs["none/mixed/redis-kills"] / "faults.jsonl"
    kills = [json.loads(line) for line in kill_log.read_text().splitlines()]
    assert [f["name"] for f in kills] == ["redis-kill-1", "redis-kill-2", "redis-kill-3"]
    for key, run_dir in runs.items():
        result = json.loads((run_dir / "result.json").read_text())
        assert result["valid"] is True and result["verdict"] == "pass", key
        assert result["counts"]["operations"] > 50, key
        # conclusive: every path the scenario and its plan promised ran at least once
        assert result["promised_paths"], key
        for path in result["promised_paths"]:
            assert result["paths"][path] > 0, (key, path)
        faults = [json.loads(line) for line in (run_dir / "faults.jsonl").read_text().splitlines()]
        assert faults, f"{key} ran under a plan but logged no fault"
        assert all(f["end"] >= f["start"] and f["error"] is None for f in faults), key
        for name in ("settings.json", "plan.yaml", "export.ndjson", "final_reads.ndjson",
                     "junit.xml", "report.html",
                     "locust/report.html", "locust/stats_stats.csv"):
            assert (run_dir / name).is_file(), f"{key}: {name} missing"
        assert list((run_dir / "histories").glob("*.jsonl")), key
        # the services' logs: copied from the lane's stack the run shared (harness.run.smoke)
        assert list((run_dir / "logs").glob("*.log")), key
        assert json.loads((run_dir / "settings.json").read_text())["scope"], key  # judged by what it recorded


def test_crash_point_cells_fired_the_points_they_armed(smoke_run: SmokeRun) -> None:
    runs = _runs(smoke_run)
    for mutant, points in CONTROL_CRASH_POINTS.items():
        (run_dir,) = [path for key, path in runs.items() if key.startswith(f"{mutant}/")]
        faults = [json.loads(line) for line in (run_dir / "faults.jsonl").read_text().splitlines()]
        assert sorted(f["crash_point"] for f in faults) == sorted(points), mutant
        for fault in faults:
            assert fault["kind"] == "crash_point" and fault["error"] is None, (mutant, fault)
            assert fault["hits"] > 0 and len(fault["hit_times"]) == fault["hits"], (mutant, fault)
            assert all(fault["start"] <= at <= fault["end"] for at in fault["hit_times"]), (mutant, fault)
    for scenario in ("timeout_replay", "redelivered_messages"):
        faults = [json.loads(line) for line in
                  (runs[f"none/{scenario}/crash-points"] / "faults.jsonl").read_text().splitlines()]
        assert {f["crash_point"] for f in faults} == set(CRASH_POINTS), scenario
        assert all(f["error"] is None and f["hits"] == len(f["hit_times"]) for f in faults), scenario
        hits = {f["name"]: f["hits"] for f in faults}
        # the windows the plan's promises rest on fired (both scenarios create orders)
        assert hits["api-domain-error"] > 0 and hits["api-store-drop"] > 0, (scenario, hits)
        if scenario == "redelivered_messages":  # and the consumers' points, in several windows
            fired = [f for f in faults if CRASH_POINTS[f["crash_point"]][1] == "consumer" and f["hits"]]
            assert len(fired) >= 2, hits


def test_a_failing_report_carries_the_evidence(smoke_run: SmokeRun) -> None:
    (run_dir,) = [p for key, p in _runs(smoke_run).items() if key.startswith("domain/")]
    result = json.loads((run_dir / "result.json").read_text())
    (invariant,) = [i for i in result["invariants"] if i["name"] == "one_payment_per_order"]
    violation = invariant["violations"][0]
    html = (run_dir / "report.html").read_text()
    assert re.search(r"""id=['"]verdict['"][^>]*data-valid=['"]false['"]""", html)
    assert violation["order_id"] in html
    for payment in violation["evidence"]["payments"]:
        assert payment["provider_ref"] in html
    junit = (run_dir / "junit.xml").read_text()
    assert "one_payment_per_order" in junit and "<failure" in junit


def test_check_rewrites_the_reports_of_a_saved_run(smoke_run: SmokeRun, tmp_path: Path) -> None:
    runs = _runs(smoke_run)
    failing = shutil.copytree(next(p for k, p in runs.items() if k.startswith("inbox/")), tmp_path / "failing")
    passing = shutil.copytree(next(p for k, p in runs.items() if k.startswith("none/")), tmp_path / "passing")
    for run_dir in (failing, passing):
        (run_dir / "report.html").unlink()
        (run_dir / "result.json").unlink()
    assert harness("check", str(failing), cwd=tmp_path).code == 1
    assert harness("check", str(passing), cwd=tmp_path).code == 0
    assert json.loads((failing / "result.json").read_text())["valid"] is False
    assert (passing / "report.html").is_file()
    missing = harness("check", str(tmp_path / "nothing-here"), cwd=tmp_path)
    assert missing.code == 2 and len(missing.stderr.strip().splitlines()) == 1
