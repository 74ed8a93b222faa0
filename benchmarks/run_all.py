"""Run every benchmark in this folder, one after the other (`make bench`).

Each `bench_*.py` measures its ratios side by side in one run and prints a table;
the numbers that were recorded are in benchmarks/README.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    wanted = set(argv)
    failures = 0
    for script in sorted(here.glob("bench_*.py")):
        if wanted and script.stem not in wanted and script.stem.removeprefix("bench_") not in wanted:
            continue
        print(f"== {script.name}", flush=True)
        completed = subprocess.run([sys.executable, str(script)], cwd=here.parent)
        failures += completed.returncode != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
