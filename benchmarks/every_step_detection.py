"""Which plan catches the PostgreSQL example's `split-commit` mode (the payment and
its answer committed in two transactions), seed by seed: `probe-dependencies`
(the database slow, gone, resetting; the service paused and killed at set times)
against `every-step` (a crash before and after every step the service sends).

    .venv/bin/python benchmarks/every_step_detection.py --seeds 1,2,3 [--mode split-commit]

Each run gets a fresh database on one private PostgreSQL cluster
(tests/support/postgres.py); the seed is the load's (`load.seed`: which requests,
keys and timings the clients make). Prints one line per run (plan, seed, verdict,
the invariants that failed, the run's time) and a summary per plan. Measured, never
asserted: the numbers go into docs/probe.md and benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.probe.config import parse_config  # noqa: E402
from harness.probe.runner import ProbeSpec, run_probe  # noqa: E402
from tests.support.postgres import PostgresDatabase, PostgresServer  # noqa: E402

SCRIPT = ROOT / "examples/pg_payments_service.py"
CONFIG = ROOT / "examples/pg_payments_service.yaml"
# The every-step plan as tests/probe/test_every_step.py runs it (the bundled plan's
# exploration in a shorter load).
EVERY_STEP = {"seed": 7, "explore": {"steps": "every", "actions": ["before", "after"], "learn": "1.5s",
                                     "budget": "60s", "each": 1, "wait": "4s", "settle": "0.3s"}}
PLANS: dict[str, tuple[Any, str]] = {
    # The plan, and the load it runs under (as the example's tests give them).
    "probe-dependencies": (ROOT / "harness/plans/probe-dependencies.yaml", "8s"),
    "every-step": (EVERY_STEP, "2s"),  # the load lasts as long as the exploration
}


def config(mode: str, database: PostgresDatabase, seed: int, duration: str) -> Any:
    raw = yaml.safe_load(CONFIG.read_text())
    raw["endpoints"][0]["effects"]["dsn"] = database.dsn
    raw.pop("plan")
    raw["load"].update({"duration": duration, "users": 4, "seed": seed})
    raw["service"] = {"command": [sys.executable, str(SCRIPT), "--mode", mode, "--port", "{port}",
                                  "--dsn", f"postgresql://{database.user}@{{dependency.db}}/{database.name}"],
                      "ready": {"path": "/healthz", "timeout": "20s"}}
    raw["dependencies"] = {"db": {"address": database.address, "protocol": "postgres"}}
    return parse_config(raw, source=str(CONFIG))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3", help="load seeds, comma-separated")
    parser.add_argument("--mode", default="split-commit")
    parser.add_argument("--plans", default=",".join(PLANS))
    parser.add_argument("--out", default=None, help="keep the run directories here (default: a temporary folder)")
    args = parser.parse_args()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    server = PostgresServer()
    server.start()
    caught: dict[str, list[bool]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="every-step-") as temporary:
            folder = args.out or temporary
            Path(folder).mkdir(parents=True, exist_ok=True)
            for number, (name, seed) in enumerate((p, s) for s in seeds for p in args.plans.split(",")):
                plan, duration = PLANS[name]
                database = server.create_database(f"detect_{number}")
                path = Path(folder) / f"{name}-{seed}.yaml"
                if isinstance(plan, Path):
                    path = plan
                else:
                    path.write_text(yaml.safe_dump(plan))
                began = time.monotonic()
                result = run_probe(ProbeSpec(config=config(args.mode, database, seed, duration),
                                             out_dir=Path(folder) / f"run-{name}-{seed}", plan=path))
                failed = sorted(inv.name for inv in result.check.invariants if not inv.passed)
                caught.setdefault(name, []).append("one_effect_per_key" in failed)
                print(f"{name:20} seed {seed}: {result.verdict:12} failed: {', '.join(failed) or '-':50} "
                      f"{time.monotonic() - began:5.1f} s", flush=True)
    finally:
        server.stop()
    for name, hits in caught.items():
        print(f"{name}: {args.mode} caught (one_effect_per_key) in {sum(hits)} of {len(hits)} seeds")


if __name__ == "__main__":
    main()
