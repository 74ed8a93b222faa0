"""Each control's smoke cell loads for what its measured detection latency needs
(issue 24): `CONTROL_LOADS` covers every control with twice its worst latency over
the seeds of benchmarks/results/detection.json plus a second, the cells get those
loads (correct runs keep the job's duration), and the benchmark's own rule (a
control whose worst latency is above its cell's load fails) catches a late one."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from harness.load.forkserver import ForkServerError, LocustForkServer
from harness.load.settings import DEFAULT_THINK_TIME, parse_think_time
from harness.names import ENV_THINK_TIME
from harness.run import runner
from harness.run import smoke as smoke_module
from harness.run.rundir import RunDir
from harness.run.runner import RunSpec
from harness.run.smoke import (
    CONTROL_APP_WORKERS,
    CONTROL_LOADS,
    CRASH_POINTS_APP_WORKERS,
    MIN_CONTROL_LOAD,
    MUTANT_CASES,
    SMOKE_DURATION,
    SMOKE_STOP_TIMEOUT,
    SMOKE_THINK_TIME,
    control_load,
    smoke_specs,
)
from tests.support.stacks import sample_info

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
    correct = {label: spec for label, (spec, expect) in cells.items() if not expect}
    assert correct and all(spec.duration == SMOKE_DURATION for spec in correct.values())
    for label, spec in correct.items():
        wanted = max(base.app_workers, CRASH_POINTS_APP_WORKERS) if label.endswith("/ crash-points") \
            else base.app_workers
        assert spec.app_workers == wanted, label
    few = {label: spec.app_workers for label, spec, _, _ in smoke_specs(replace(base, app_workers=2))}
    assert few["correct app / timeout_replay / crash-points"] == CRASH_POINTS_APP_WORKERS
    assert few["correct app / mixed"] == 2
    # a shorter job never loads a control's cell for longer than itself
    short = {label: spec for label, spec, _, _ in smoke_specs(RunSpec(scenario="mixed", duration=2.0,
                                                                     runs_root=tmp_path))}
    assert all(spec.duration <= 2.0 for spec in short.values())


def test_every_step_gets_the_jobs_think_time_and_stop_timeout_unless_given_its_own(tmp_path: Path) -> None:
    base = RunSpec(scenario="mixed", users=10, duration=SMOKE_DURATION, runs_root=tmp_path)
    assert base.think_time is None
    own_pace = {f"mutant {case.mutant} / {case.scenario}": case.think_time for case in MUTANT_CASES}
    for label, spec, expect, _ in smoke_specs(base):
        assert spec.stop_timeout == SMOKE_STOP_TIMEOUT
        if expect:  # a control: the job's pace unless its case names its own
            assert spec.think_time == (own_pace.get(label) or SMOKE_THINK_TIME), label
        else:  # a correct run: full speed, the pace its plan's promises were written for
            assert spec.think_time == DEFAULT_THINK_TIME, label
    own = RunSpec(scenario="mixed", think_time=(0.0, 0.01), stop_timeout=0.0, runs_root=tmp_path)
    for label, spec, _, _ in smoke_specs(own):
        assert (spec.think_time, spec.stop_timeout) == (own_pace.get(label) or (0.0, 0.01), 0.0), label


def test_the_load_process_gets_the_runs_think_time(tmp_path: Path) -> None:
    info = sample_info(root=str(tmp_path))
    run_dir = RunDir.create(tmp_path, "a-run")
    paced = runner._load_env(RunSpec(scenario="mixed", think_time=(0.1, 0.2)), info, run_dir)
    assert parse_think_time(paced[ENV_THINK_TIME]) == (0.1, 0.2)
    # None: the load's own default, whatever this process was given
    unpaced = runner._load_env(RunSpec(scenario="mixed"), info, run_dir)
    assert unpaced.get(ENV_THINK_TIME) == os.environ.get(ENV_THINK_TIME)


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


def test_the_job_runs_without_a_fork_server_that_will_not_start(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: LocustForkServer) -> None:
        raise ForkServerError("the Locust fork server exited with 1; see its log")

    monkeypatch.setattr(LocustForkServer, "start", refuse)
    out = io.StringIO()
    with smoke_module._locust_forkserver(tmp_path, out=out) as socket_path:
        assert socket_path is None  # each run starts its own Locust
    assert out.getvalue().count("\n") == 1 and "each run starts its own Locust" in out.getvalue()


def test_the_job_forks_its_runs_from_one_server_it_stops(tmp_path: Path) -> None:
    with smoke_module._locust_forkserver(tmp_path, out=io.StringIO()) as socket_path:
        assert socket_path is not None and socket_path.is_socket()
    assert not socket_path.exists()
