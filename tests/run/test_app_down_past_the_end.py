"""End to end: a run whose plan keeps the `app` proxy down for longer than the run is
inconclusive (exit 3), because the fault stays on until the load has stopped and the
load window acknowledged (next to) nothing. Healed at the run's duration instead, the
users' last retries were answered and the run said PASS (issue 18, item 5).

A plan's clock starts at the load's first request, so the few requests answered before
the window at 0 s took the proxy down are acknowledged: the run is judged with a
`--min-acknowledged` above them, and no answer may come after the proxy went down."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.history import history_files, iter_operations
from tests.support.cli import clean_env, run_harness

MIN_ACKNOWLEDGED = 50


@pytest.mark.slow
def test_app_down_for_longer_than_the_run_is_inconclusive(tmp_path: Path) -> None:
    plan = tmp_path / "app-gone.yaml"
    plan.write_text("seed: 1\nwindows:\n  - {at: 0s, for: 60s, proxy_down: app, name: app-gone}\n")
    result = run_harness("run", "timeout_replay", "--users", "4", "--duration", "3s", "--app-workers", "2",
                         "--plan", str(plan), "--runs-dir", str(tmp_path / "runs"),
                         "--min-acknowledged", str(MIN_ACKNOWLEDGED),
                         cwd=tmp_path, env=clean_env(), timeout=300)
    assert result.returncode == 3, result.stdout + result.stderr[-3000:]
    assert result.stdout.startswith("INCONCLUSIVE:"), result.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    checked = json.loads((run_dir / "result.json").read_text())
    assert checked["verdict"] == "inconclusive"
    assert checked["counts"]["acknowledged"] < MIN_ACKNOWLEDGED
    assert checked["counts"]["operations"] > 0  # the users did try, and were refused
    assert any("acknowledged" in reason for reason in checked["inconclusive_reasons"])
    # The fault stayed on past the run's 3 s, until the load had stopped, and was healed then.
    load = json.loads((run_dir / "load.json").read_text())
    (fault,) = [json.loads(line) for line in (run_dir / "faults.jsonl").read_text().splitlines()]
    assert fault["name"] == "app-gone" and fault["error"] is None
    assert load["started"] <= fault["start"] + 1.0
    assert fault["end"] >= load["stopped"] and load["healed"] >= fault["end"]
    # (Not "lasted 3 s": Locust's own run-time clock starts a little before the first
    # request, which starts the plan's; the window held from that request to the load's end.)
    # Nothing was answered while the proxy was down: every acknowledgement came before it.
    answered = [op["complete_time"] for op in iter_operations(history_files(run_dir / "histories"))
                if op["type"] == "ok"]
    assert all(at <= fault["start"] + 0.5 for at in answered), (fault["start"], sorted(answered)[-3:])
    assert "data-verdict='inconclusive'" in (run_dir / "report.html").read_text()
