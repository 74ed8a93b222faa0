"""Detection latency of every negative control of the smoke job (issue 24, item 1).

Contract: each control cell of `harness smoke` (its spec from
`harness.run.smoke.smoke_specs`: scenario, plan or `control_plan`, app environment,
users) is run over several seeds with a probing load at least as long as the cell's
smoke load, and for each control this records, from the runs' result.json and
load.json: the seconds of load until the first violation of the control's own
invariant (`first_violation_s`, median and worst over the seeds), that invariant's
violations per second of load (median and worst, the lowest rate being the worst),
and whether every seed caught it. The table goes to stdout and
benchmarks/results/detection.json, a plot (SVG, harness.report.plots) beside it.

A control not caught on some seed, or whose worst latency is above its cell's smoke
load, is a failing benchmark: exit 1, naming it. Runs go to a temporary folder that
is removed afterwards (`--keep` keeps it).

    .venv/bin/python benchmarks/bench_detection.py [--seeds 5] [--duration 6] [--parallel 3]
        [--only CONTROL[,CONTROL] [--update]] [--out benchmarks/results/detection.json]
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from harness.catalog import SCENARIOS
from harness.errors import HarnessError
from harness.report.plots import horizontal_bar_chart
from harness.run.runner import RunSpec, run
from harness.run.smoke import MUTANT_CASES, SMOKE_DURATION, SMOKE_USERS, MutantCase, smoke_specs

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "detection.json"
CAUGHT_COLOR = "#2a7ab0"
LATE_COLOR = "#c0392b"


@dataclass(frozen=True)
class SeedRun:
    """One seed of one control: when its own invariant first failed, and how often."""

    seed: int
    exit_code: int
    first_violation_s: float | None
    violations: int
    load_seconds: float
    failed: list[str]
    error: str | None = None

    @property
    def violations_per_second(self) -> float:
        return self.violations / self.load_seconds if self.load_seconds > 0 else 0.0


@dataclass(frozen=True)
class ControlRow:
    """One control over every seed, against its smoke cell's load."""

    control: str
    scenario: str
    plan: str
    invariant: str
    smoke_load_s: float
    probe_load_s: float
    caught: int
    seeds: int
    latency_median_s: float | None
    latency_worst_s: float | None
    rate_median: float | None
    rate_worst: float | None
    runs: list[SeedRun]

    @property
    def failure(self) -> str | None:
        """Why this control fails the benchmark, or None."""
        if self.caught < self.seeds:
            return f"caught by {self.invariant} on {self.caught} of {self.seeds} seeds"
        if self.latency_worst_s is None or self.latency_worst_s > self.smoke_load_s:
            return (f"worst latency {self.latency_worst_s} s is above its smoke load "
                    f"of {self.smoke_load_s:g} s")
        return None


def control_specs(runs_root: Path) -> dict[str, tuple[MutantCase, RunSpec]]:
    """Each control's smoke cell spec, as `harness smoke` with its defaults builds it."""
    base = RunSpec(scenario=SCENARIOS[0], users=SMOKE_USERS, duration=SMOKE_DURATION,
                   runs_root=runs_root, attach=False, progress=False)
    by_label = {label: spec for label, spec, expect, _ in smoke_specs(base) if expect}
    return {case.mutant: (case, by_label[f"mutant {case.mutant} / {case.scenario}"]) for case in MUTANT_CASES}


def run_seed(case: MutantCase, spec: RunSpec, seed: int) -> SeedRun:
    """One run of the control's cell with this seed; its own invariant read from result.json."""
    try:
        outcome = run(spec, out=sys.stderr if spec.progress else io.StringIO())
    except HarnessError as error:
        return SeedRun(seed, 2, None, 0, 0.0, [], str(error))
    result = json.loads((outcome.run_dir / "result.json").read_text())
    load = json.loads((outcome.run_dir / "load.json").read_text())
    own = next((inv for inv in result["invariants"] if inv["name"] == case.invariant), None)
    failed = [inv["name"] for inv in result["invariants"] if not inv["passed"]]
    started, stopped = load.get("started"), load.get("stopped") or load.get("healed")
    load_seconds = float(stopped - started) if started is not None and stopped is not None else spec.duration
    caught = own is not None and not own["passed"]
    return SeedRun(seed, outcome.exit_code,
                   own.get("first_violation_s") if caught and own is not None else None,
                   int(own["violation_count"]) if caught and own is not None else 0,
                   load_seconds, failed)


def summarise(case: MutantCase, spec: RunSpec, smoke_load: float, runs: list[SeedRun]) -> ControlRow:
    latencies = [r.first_violation_s for r in runs if r.first_violation_s is not None]
    rates = [r.violations_per_second for r in runs if r.first_violation_s is not None]
    caught = len(latencies)
    return ControlRow(
        control=case.mutant, scenario=case.scenario,
        plan=Path(spec.plan).stem if spec.plan is not None else "no plan",
        invariant=case.invariant, smoke_load_s=smoke_load, probe_load_s=spec.duration,
        caught=caught, seeds=len(runs),
        latency_median_s=round(statistics.median(latencies), 3) if latencies else None,
        # a seed that never caught it has no latency: the worst is then unknown (None)
        latency_worst_s=round(max(latencies), 3) if latencies and caught == len(runs) else None,
        rate_median=round(statistics.median(rates), 2) if rates else None,
        rate_worst=round(min(rates), 2) if rates and caught == len(runs) else None,
        runs=runs)


def format_table(rows: list[ControlRow]) -> str:
    lines = ["| control | scenario | plan | own invariant | smoke load s | first violation s, median / worst "
             "| violations/s, median / worst | caught |",
             "|---|---|---|---|---:|---:|---:|---|"]
    for row in rows:
        verdict = f"{row.caught}/{row.seeds}" + ("" if row.failure is None else " **FAIL**")
        lines.append(f"| {row.control} | {row.scenario} | {row.plan} | {row.invariant} | {row.smoke_load_s:g} "
                     f"| {_num(row.latency_median_s)} / {_num(row.latency_worst_s)} "
                     f"| {_num(row.rate_median)} / {_num(row.rate_worst)} | {verdict} |")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def plot(rows: list[ControlRow]) -> str:
    bars = [(f"{row.control} ({row.smoke_load_s:g} s load)", row.latency_worst_s or row.probe_load_s,
             CAUGHT_COLOR if row.failure is None else LATE_COLOR) for row in rows]
    return horizontal_bar_chart("detection", "Worst seconds of load to the first violation, per control",
                                bars, legend=[("within its smoke load", CAUGHT_COLOR),
                                              ("late or missed", LATE_COLOR)])


def _row_of(data: dict[str, Any]) -> ControlRow:
    """A row of detection.json read back (its seed runs as records)."""
    fields = {key: value for key, value in data.items() if key not in ("failure", "measured_at", "runs")}
    return ControlRow(**fields, runs=[SeedRun(**run) for run in data["runs"]])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=6.0,
                        help="probing load per run, seconds (at least each cell's smoke load)")
    parser.add_argument("--parallel", type=int, default=3)
    parser.add_argument("--only", default="", help="comma list of controls")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    parser.add_argument("--update", action="store_true",
                        help="replace only the measured controls' rows in --out, keep the others")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.duration <= 0 or args.parallel < 1:
        parser.error("--seeds, --duration and --parallel must be positive")
    root = Path(tempfile.mkdtemp(prefix="bench-detection-"))
    try:
        specs = control_specs(root)
        wanted = [name for name in args.only.split(",") if name] or list(specs)
        unknown = [name for name in wanted if name not in specs]
        if unknown:
            parser.error(f"unknown control(s) {', '.join(unknown)}; choose from {', '.join(specs)}")
        jobs = []
        for name in wanted:
            case, spec = specs[name]
            probe = replace(spec, duration=max(args.duration, spec.duration))
            for seed in range(1, args.seeds + 1):
                jobs.append((name, case, replace(probe, seed=seed, run_id=f"{name}-seed{seed}")))
        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            results = list(pool.map(lambda job: (job[0], run_seed(job[1], job[2], job[2].seed)), jobs))
        elapsed = time.monotonic() - began
        rows = []
        for name in wanted:
            case, spec = specs[name]
            runs = [seed_run for control, seed_run in results if control == name]
            rows.append(summarise(case, replace(spec, duration=max(args.duration, spec.duration)),
                                  spec.duration, runs))
        print(format_table(rows))
        print(f"\n{len(jobs)} runs, {args.parallel} side by side, {elapsed:.0f} s")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        document = {"seeds": args.seeds, "probe_duration_s": args.duration, "parallel": args.parallel,
                    "elapsed_s": round(elapsed, 1), "measured_at": now,
                    "controls": [{**asdict(row), "failure": row.failure, "measured_at": now} for row in rows]}
        if args.update and args.out.is_file():  # the other controls' rows as they were measured
            kept = [row for row in json.loads(args.out.read_text())["controls"] if row["control"] not in wanted]
            document["controls"] = sorted(kept + document["controls"], key=lambda row: list(specs).index(row["control"]))
        args.out.write_text(json.dumps(document, indent=2) + "\n")
        args.out.with_suffix(".svg").write_text(plot([_row_of(row) for row in document["controls"]]))
        print(f"wrote {args.out} and {args.out.with_suffix('.svg')}")
    finally:
        if args.keep:
            print(f"runs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    failures = [f"{row.control}: {row.failure}" for row in rows if row.failure is not None]
    for failure in failures:
        print(f"FAIL {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
