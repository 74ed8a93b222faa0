"""Run a locustfile headless in a subprocess and read back what it recorded.

Locust monkey-patches the process it is imported in, so the tests never import it
(nor the modules of harness.load that import it: settings is plain); they run
`python -m locust` the way the harness does, for a load of `--harness-run-time` seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from harness.history import history_files, iter_records
from harness.load.settings import RUN_TIME_FLAG
from harness.ports import free_port
from harness.stack.info import StackInfo

REPO = Path(__file__).resolve().parents[2]
LOCUSTFILES = REPO / "harness" / "locustfiles"


def run_locust(locustfile: str, host: str, env: dict[str, str], *, users: int = 4,
               seconds: int = 4, processes: int = 1, timeout: float = 60.0) -> int:
    """Run headless for `seconds` of load; the number of requests in Locust's final statistics."""
    # --harness-run-time, not Locust's -t: -t's clock starts before the users, and on a
    # machine busy with other test workers Locust's own start used up all of a 2 s run
    # (no request at all); the harness's counts from test_start, as the harness runs it.
    args = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILES / locustfile), "--headless",
            "-u", str(users), "-r", str(users), RUN_TIME_FLAG, str(seconds), "--host", host,
            "--only-summary", "--stop-timeout", "1", "--exit-code-on-error", "0", "--json"]
    if processes > 1:
        port = free_port()
        args += ["--processes", str(processes), "--master-bind-host", "127.0.0.1",
                 "--master-bind-port", str(port), "--master-host", "127.0.0.1",
                 "--master-port", str(port)]
    # HARNESS_ROOT empty: no stack of this checkout (.harness) is read for what env leaves out.
    full_env = {**os.environ, "HARNESS_ROOT": "", **env}
    result = subprocess.run(args, env=full_env, capture_output=True, text=True, timeout=timeout,
                            cwd=REPO)
    assert result.returncode == 0, f"locust failed ({result.returncode}):\n{result.stderr[-3000:]}"
    return json_requests(result.stdout)


def json_requests(stdout: str) -> int:
    """Requests in the statistics `--json` printed (the last JSON document of stdout)."""
    # --json prints the final statistics (CSV files are written before the last report);
    # with --processes each worker prints its own empty list first, the master last.
    decoder = json.JSONDecoder()
    text, position, stats = stdout, 0, []
    while text[position:].strip():
        position += len(text[position:]) - len(text[position:].lstrip())
        stats, position = decoder.raw_decode(text, position)
    return sum(int(entry["num_requests"]) for entry in stats)


def load_env(info: StackInfo, history: Path) -> dict[str, str]:
    """The load's environment for a stack started by a test (two SKUs, seed 3)."""
    return {
        "HARNESS_HISTORY_DIR": str(history),
        "HARNESS_REDIS_URL": info.redis_url,
        "HARNESS_STREAM": info.stream,
        "TARGET_APP_WEBHOOK_SECRET": info.webhook_secret,
        "HARNESS_SEED": "3",
        "HARNESS_SKUS": "sku-1,sku-2",
    }


def records(history_dir: Path) -> list[dict[str, Any]]:
    return [record for path in history_files(history_dir) for record in iter_records(path)]


def expect_counts(recorded: list[dict[str, Any]]) -> Counter[str]:
    return Counter(r["expect"] for r in recorded if r["type"] == "invoke" and r.get("expect"))


def completions(recorded: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Completion record per op_id (asserting there is at most one each)."""
    result: dict[str, dict[str, Any]] = {}
    for record in recorded:
        if record["type"] != "invoke":
            assert record["op_id"] not in result, f"two completions for {record['op_id']}"
            result[record["op_id"]] = record
    return result

