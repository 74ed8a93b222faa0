"""Soak: long runs side by side, and whether anything grows without bound.

Starts, at the same moment and side by side:

- `--pairs` times `harness run mixed --plan chaos --workers 4` for `--minutes`
  (each with a stack of its own, under its own runs directory), and
- `--pairs` times `harness probe` against the example payments service
  (examples/payments_service.py --mode fixed, started here on a free loopback port)
  for as long, under harness/plans/probe.yaml.

Every `--every` seconds it samples each harness process and all its descendants
(psutil): resident memory, open file descriptors and threads, and the size of each
run directory. At the end it prints, per command: the verdict and exit code, and per
process name the first and last samples and the largest, the run directory's growth
per minute, and writes every sample to `--out/soak.jsonl`. A process whose memory,
descriptors or threads only ever rise across the samples is flagged ("rising").

    .venv/bin/python benchmarks/bench_soak.py --minutes 10 --pairs 2 --out /tmp/soak

Bounded: each command gets its own timeout (`--minutes` + 3 minutes), and every
process it started is stopped at the end. Loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.ports import free_port  # noqa: E402

HARNESS = str(ROOT / ".venv" / "bin" / "harness")


@dataclass
class Command:
    name: str
    argv: list[str]
    run_dir: Path
    process: subprocess.Popen[bytes] | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)
    output: Path | None = None


def _dir_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _sample(command: Command, started: float) -> None:
    assert command.process is not None
    try:
        top = psutil.Process(command.process.pid)
        processes = [top, *top.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    rows = []
    for process in processes:
        try:
            with process.oneshot():
                rows.append({"pid": process.pid, "name": _label(process), "rss": process.memory_info().rss,
                             "fds": process.num_fds(), "threads": process.num_threads()})
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    command.samples.append({"t": round(time.monotonic() - started, 1), "dir_bytes": _dir_size(command.run_dir),
                            "processes": rows})


def _label(process: psutil.Process) -> str:
    """A stable name for a process across samples: its program and first telling argument."""
    try:
        argv = process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return process.name()
    words = [Path(word).name for word in argv[:6] if not word.startswith("-")]
    for marker in ("locust", "gunicorn", "redis-server", "harness", "payments_service.py", "janitor", "supervisor",
                   "toxiproxy"):
        if any(marker in word for word in words) or any(marker in word for word in argv):
            return marker
    return words[0] if words else process.name()


def _summary(command: Command) -> dict[str, Any]:
    by_name: dict[str, list[tuple[float, int, int, int]]] = defaultdict(list)
    for sample in command.samples:
        totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for row in sample["processes"]:
            total = totals[row["name"]]
            total[0] += row["rss"]
            total[1] += row["fds"]
            total[2] += row["threads"]
        for name, (rss, fds, threads) in totals.items():
            by_name[name].append((sample["t"], rss, fds, threads))
    processes = {}
    for name, series in by_name.items():
        rss = [s[1] for s in series]
        fds = [s[2] for s in series]
        threads = [s[3] for s in series]
        # Rising: never falls and ends above where the second sample was (the first is start-up).
        steady = series[1:] if len(series) > 2 else series
        rising = {label: len(steady) > 2 and all(b >= a for a, b in zip(values[1:], values[2:], strict=False))
                  and values[-1] > values[1] * 1.2
                  for label, values in (("rss", rss), ("fds", fds), ("threads", threads))}
        processes[name] = {"samples": len(series), "rss_mib_first": round(rss[0] / 2**20, 1),
                           "rss_mib_last": round(rss[-1] / 2**20, 1), "rss_mib_max": round(max(rss) / 2**20, 1),
                           "fds_first": fds[0], "fds_last": fds[-1], "fds_max": max(fds),
                           "threads_first": threads[0], "threads_last": threads[-1], "threads_max": max(threads),
                           "rising": [label for label, flag in rising.items() if flag]}
    sizes = [(s["t"], s["dir_bytes"]) for s in command.samples]
    per_minute = ((sizes[-1][1] - sizes[0][1]) / max(1e-9, (sizes[-1][0] - sizes[0][0]) / 60.0)
                  if len(sizes) > 1 else 0.0)
    verdict = None
    result = command.run_dir / "result.json"
    if not result.exists():
        found = sorted(command.run_dir.glob("*/result.json"))
        result = found[-1] if found else result
    if result.exists():
        verdict = json.loads(result.read_text()).get("verdict")
    return {"command": command.name, "exit": command.process.returncode if command.process else None,
            "verdict": verdict, "run_dir_mib_per_minute": round(per_minute / 2**20, 2), "processes": processes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--every", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--out", type=Path, default=Path("/tmp/harness-soak"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    seconds = int(args.minutes * 60)
    services: list[subprocess.Popen[bytes]] = []
    commands: list[Command] = []
    for number in range(args.pairs):
        runs = args.out / f"run-{number}"
        commands.append(Command(f"run-{number}", [HARNESS, "run", "mixed", "--plan", "chaos", "--workers", "4",
                                                  "--duration", f"{seconds}s", "--runs-dir", str(runs),
                                                  "--seed", str(number + 1)], runs))
        port = free_port()
        services.append(subprocess.Popen([sys.executable, str(ROOT / "examples/payments_service.py"), "--mode",
                                          "fixed", "--port", str(port), "--db", ":memory:"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        probe_dir = args.out / f"probe-{number}"
        commands.append(Command(f"probe-{number}", [HARNESS, "probe", "--config",
                                                    str(ROOT / "examples/payments_service.yaml"),
                                                    "--upstream", f"127.0.0.1:{port}", "--plan", "probe",
                                                    "--duration", f"{seconds}s", "--out", str(probe_dir),
                                                    "--seed", str(number + 1)], probe_dir))
    time.sleep(1.0)  # the example services are listening
    started = time.monotonic()
    try:
        for command in commands:
            command.output = args.out / f"{command.name}.log"
            with open(command.output, "wb") as log:
                command.process = subprocess.Popen(command.argv, stdout=log, stderr=subprocess.STDOUT,
                                                   cwd=ROOT, start_new_session=True)
        deadline = started + seconds + 180
        next_sample = started + min(10.0, args.every)
        while any(c.process is not None and c.process.poll() is None for c in commands):
            if time.monotonic() > deadline:
                break
            if time.monotonic() >= next_sample:
                for command in commands:
                    if command.process is not None and command.process.poll() is None:
                        _sample(command, started)
                next_sample += args.every
            time.sleep(1.0)
    finally:
        for command in commands:
            if command.process is not None and command.process.poll() is None:
                os.killpg(command.process.pid, signal.SIGTERM)
                command.process.wait(timeout=60)
        for service in services:
            service.terminate()
            service.wait(timeout=10)
    summaries = [_summary(command) for command in commands]
    with open(args.out / "soak.jsonl", "w") as out:
        for command in commands:
            out.write(json.dumps({"command": command.name, "samples": command.samples}) + "\n")
    print(json.dumps(summaries, indent=2))
    return 0 if all(s["verdict"] == "pass" for s in summaries) else 1


if __name__ == "__main__":
    raise SystemExit(main())
