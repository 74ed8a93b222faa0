"""One smoke lane on a real stack: what a step leaves behind never makes a later one
pass or fail wrongly.

The lane runs the correct app twice, then the `api` control (its app restarted without
the Idempotency-Key layer, Redis emptied), then the correct app again, all on the one
stack it started. Each correct run passes, judged only by what it recorded: the second
one's baseline holds the first one's orders, and judged whole, without its scope, the
same run fails (the test can tell). The control is caught by its own invariant, and
the run after it starts from a stack that holds nothing of the control's. When the
lane ends its stack is gone.
"""

from __future__ import annotations

import io
import json
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from harness.exit_codes import EXIT_VIOLATION
from harness.run.runner import RunSpec, check_saved_run
from harness.run.smoke import LANE_STACKS_DIR, SmokeSpec, SmokeStep, run_lane
from tests.stack.conftest import wait_until_gone
from tests.support.cli import clean_env, start_harness


def _orders(path: Path) -> set[str]:
    return {str(record["id"]) for record in map(json.loads, path.read_text().splitlines())
            if record.get("kind") == "order"}


@pytest.mark.slow
def test_a_lane_judges_each_step_by_what_it_recorded(tmp_path: Path) -> None:
    base = RunSpec(scenario="timeout_replay", users=6, duration=4.0, app_workers=2, consumers=1,
                   runs_root=tmp_path / "runs", progress=False, min_acknowledged=20)
    control = replace(base, unsafe_disable=("api",), duration=3.0)
    specs: list[SmokeSpec] = [("correct 1", base, False, None), ("correct 2", base, False, None),
                              ("mutant api", control, True, "one_order_per_key"),
                              ("correct 3", base, False, None)]
    done: dict[int, SmokeStep] = {}
    root = tmp_path / "lane"
    run_lane(root, range(len(specs)), specs, done, out=io.StringIO(), lock=threading.Lock(),
             stopping=threading.Event())
    processes, _ = wait_until_gone(root.resolve(), [])
    assert processes == [], "the lane's stack outlived it"

    for index, (label, _, _, _) in enumerate(specs):
        step = done[index]
        assert step.passed, (label, step.error, step.outcome and step.outcome.summary)
    runs = [done[index].outcome.run_dir for index in range(len(specs))]  # type: ignore[union-attr]
    settings = [json.loads((run / "settings.json").read_text()) for run in runs]
    # one stack for all four: one supervisor; the control's app without the layer
    assert len({entry["stack"]["supervisor_pid"] for entry in settings}) == 1
    assert [entry["stack"]["unsafe_disable"] for entry in settings] == [[], [], ["api"], []]
    assert all(entry["scope"] for entry in settings)

    first_orders = _orders(runs[0] / "export.ndjson")
    assert first_orders and first_orders <= _orders(runs[1] / "baseline.ndjson")
    # The second run, judged whole (the first run's orders as if it had made them),
    # does not pass: its scope is what keeps the first run's state out of its verdict.
    whole = Path(shutil.copytree(runs[1], tmp_path / "judged-whole"))
    recorded = json.loads((whole / "settings.json").read_text())
    del recorded["scope"]
    (whole / "settings.json").write_text(json.dumps(recorded))
    judged = check_saved_run(whole)
    assert judged.exit_code == EXIT_VIOLATION, judged.summary

    # The control left duplicates behind; the run after it starts from an empty stack.
    assert "one_order_per_key" in done[2].caught_by
    assert _orders(runs[2] / "export.ndjson")
    assert _orders(runs[3] / "baseline.ndjson") == set()
    assert not _orders(runs[3] / "export.ndjson") & _orders(runs[2] / "export.ndjson")


@pytest.mark.slow
def test_ctrl_c_stops_every_lanes_stack(tmp_path: Path) -> None:
    """`harness smoke` interrupted while its lanes run: exit 130, no lane's stack left
    (process or state file), and no step started after the interrupt."""
    runs = tmp_path / "runs"
    with open(tmp_path / "smoke.log", "w") as log:
        process = start_harness("smoke", "--parallel", "2", "--duration", "3s", "--users", "4",
                                "--app-workers", "2", "--runs-dir", str(runs),
                                cwd=tmp_path, env=clean_env(), stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 180
            states: list[Path] = []
            while time.monotonic() < deadline and process.poll() is None:
                states = sorted((runs / LANE_STACKS_DIR).glob("lane-*/state.json"))
                if len(states) == 2 and any(runs.glob("*/histories/*.jsonl")):
                    break  # both lanes' stacks up, and a run's load going
                time.sleep(0.2)
            assert len(states) == 2 and process.poll() is None, (tmp_path / "smoke.log").read_text()[-3000:]
            roots = [state.parent.resolve() for state in states]
            started = len([run for run in runs.iterdir() if (run / "settings.json").exists()])
            process.send_signal(signal.SIGINT)
            code = process.wait(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert code == 130, (tmp_path / "smoke.log").read_text()[-3000:]
    for root in roots:
        processes, _ = wait_until_gone(root, [])
        assert processes == [] and not (root / "state.json").exists(), root
    runs_after = [run for run in runs.iterdir() if (run / "settings.json").exists()]
    assert len(runs_after) <= started + 2  # at most a step each lane was just starting
