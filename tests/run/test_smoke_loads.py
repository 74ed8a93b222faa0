"""Each control's smoke cell loads for what its measured detection latency needs
(issue 24): `CONTROL_LOADS` covers every control with twice its worst latency over
the seeds of benchmarks/results/detection.json plus a second, the cells get those
loads (correct runs keep the job's duration), and the benchmark's own rule (a
control whose worst latency is above its cell's load fails) catches a late one."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.run.runner import RunSpec
from harness.run.smoke import (
    CONTROL_APP_WORKERS,
    CONTROL_LOADS,
    MIN_CONTROL_LOAD,
    MUTANT_CASES,
    SMOKE_DURATION,
    control_load,
    smoke_specs,
)

ROOT = Path(__file__).resolve().parents[2]
DETECTION = ROOT / "benchmarks" / "results" / "detection.json"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_detection", ROOT / "benchmarks" / "bench_detection.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_control_has_a_measured_load_with_its_margin() -> None:
    measured = {row["control"]: row for row in json.loads(DETECTION.read_text())["controls"]}
    assert set(CONTROL_LOADS) == {case.mutant for case in MUTANT_CASES} <= set(measured)
    for control, load in CONTROL_LOADS.items():
        row = measured[control]
        assert row["caught"] == row["seeds"] >= 5, row  # caught on every seed of the benchmark
        worst = row["latency_worst_s"]
        assert worst is not None and load >= control_load(worst) >= 2 * worst + 1, (control, load, worst)
        assert load <= SMOKE_DURATION, control


def test_control_load_is_whole_seconds_with_a_floor() -> None:
    assert control_load(0.01) == MIN_CONTROL_LOAD
    assert control_load(2.2) == 6.0  # 2 x 2.2 + 1 = 5.4, rounded up
    assert control_load(3.0) == 7.0


def test_the_cells_get_their_loads_and_the_correct_runs_the_jobs(tmp_path: Path) -> None:
    base = RunSpec(scenario="mixed", users=10, duration=SMOKE_DURATION, runs_root=tmp_path)
    cells = {label: (spec, expect) for label, spec, expect, _ in smoke_specs(base)}
    for case in MUTANT_CASES:
        spec, expect = cells[f"mutant {case.mutant} / {case.scenario}"]
        assert expect and spec.duration == CONTROL_LOADS[case.mutant], case.mutant
        assert spec.app_workers == min(base.app_workers, CONTROL_APP_WORKERS)
    correct = [spec for spec, expect in cells.values() if not expect]
    assert correct and all(spec.duration == SMOKE_DURATION and spec.app_workers == base.app_workers
                           for spec in correct)
    # a shorter job never loads a control's cell for longer than itself
    short = {label: spec for label, spec, _, _ in smoke_specs(RunSpec(scenario="mixed", duration=2.0,
                                                                     runs_root=tmp_path))}
    assert all(spec.duration <= 2.0 for spec in short.values())


def _row(bench: ModuleType, latencies: list[float | None], load: float) -> object:
    """The benchmark's row for one control whose seeds first violated at `latencies`."""
    case = MUTANT_CASES[0]
    runs = [bench.SeedRun(seed, 1 if latency is not None else 0, latency, 5 if latency is not None else 0,
                          load, [case.invariant] if latency is not None else [])
            for seed, latency in enumerate(latencies, 1)]
    return bench.summarise(case, RunSpec(scenario=case.scenario, duration=load), load, runs)


@pytest.mark.parametrize(("latencies", "load", "why"), [
    ([0.1, 0.2, 4.5], 3.0, "above its smoke load"),  # late on one seed: a failing benchmark
    ([0.1, None, 0.2], 8.0, "on 2 of 3 seeds"),      # missed on one seed
])
def test_the_benchmark_fails_a_late_or_missed_control(latencies: list[float | None], load: float,
                                                      why: str) -> None:
    bench = _bench()
    late = _row(bench, latencies, load)
    assert late.failure is not None and why in late.failure  # type: ignore[attr-defined]
    on_time = _row(bench, [0.1, 0.2, 0.5], load)
    assert on_time.failure is None and on_time.latency_worst_s == 0.5  # type: ignore[attr-defined]
