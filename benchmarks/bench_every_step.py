"""How long the plan `every-step` takes to crash every step of a probed service with
ten distinct steps (benchmarks/every_step_app.py on a Redis the probe starts),
before and after each: goal under 30 s on the project's 2-core machine.

    .venv/bin/python benchmarks/bench_every_step.py [--rounds 3] [--settle 1s]

Each round is one `harness probe` with the bundled plan's exploration (learn 2 s,
budget 30 s, settle as given); the load lasts as long as the exploration. Printed per
round: the request steps found, the crashes that fired (verified) of the 20
planned, the exploration's time (from the first crash armed to the last recovery:
every restart of the service included) and the probe's wall time. Measured, never
asserted.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.ports import free_port  # noqa: E402
from harness.probe.config import parse_config  # noqa: E402
from harness.probe.runner import ProbeSpec, run_probe  # noqa: E402

APP = ROOT / "benchmarks/every_step_app.py"


def config(port: int, duration: str) -> Any:
    redis_server = shutil.which("redis-server") or "redis-server"
    return parse_config({
        "endpoints": [{"name": "create-item", "method": "POST", "path": "/items", "id": {"pointer": "/id"},
                       "body": {"note": "{uuid}"}, "expect": {"created": [201]}}],
        "load": {"users": 4, "duration": duration, "seed": 7, "client_timeout": "1s"},
        "service": {"command": [sys.executable, str(APP), "--port", "{port}", "--redis", "{dependency.cache}"],
                    "ready": {"path": "/healthz", "timeout": "20s"}},
        "dependencies": {"cache": {"address": f"127.0.0.1:{port}", "protocol": "redis",
                                   "command": [redis_server, "--port", str(port), "--save", "",
                                               "--appendonly", "no"]}},
    }, source="bench_every_step")


def one_round(work: Path, index: int, settle: str) -> dict[str, Any]:
    plan = work / f"plan-{index}.yaml"
    plan.write_text(yaml.safe_dump({"seed": 7, "explore": {"steps": "every", "actions": ["before", "after"],
                                                          "learn": "2s", "budget": "30s", "each": 1,
                                                          "wait": "5s", "settle": settle}}))
    began = time.monotonic()
    result = run_probe(ProbeSpec(config=config(free_port(), "2s"), out_dir=work / f"run-{index}", plan=plan))
    wall = time.monotonic() - began
    explore = result.document["explore"]
    crashes = explore["crashes"]
    fired = [crash for crash in crashes if crash["outcome"] == "crashed"]
    steps = [row["step"] for row in explore["coverage"] if not row["startup"]]
    first = min(crash["start"] for crash in crashes) if crashes else 0.0
    last = max(crash["end"] for crash in crashes) if crashes else 0.0
    lines = [orjson.loads(line) for line in (result.run_dir / "faults.jsonl").read_bytes().splitlines()]
    return {"steps": len(steps), "crashed": len(fired), "planned": 2 * len(steps), "explore_s": last - first,
            "wall_s": wall, "reasons": explore["reasons"], "logged": sum(1 for line in lines if line["kind"] == "step")}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", default="1s", help="the plan's settle (the bundled plan's: 1s)")
    args = parser.parse_args()
    times = []
    with tempfile.TemporaryDirectory(prefix="bench-every-step-") as folder:
        for index in range(args.rounds):
            row = one_round(Path(folder), index, args.settle)
            times.append(row["explore_s"])
            print(f"round {index}: {row['steps']} steps, {row['crashed']}/{row['planned']} crashes verified, "
                  f"exploration {row['explore_s']:.1f} s, probe {row['wall_s']:.1f} s"
                  + (f"; {'; '.join(row['reasons'])}" if row["reasons"] else ""), flush=True)
    print(f"exploration: median {statistics.median(times):.1f} s of {len(times)} rounds "
          f"(min {min(times):.1f}, max {max(times):.1f})")


if __name__ == "__main__":
    main()
