"""`harness swarm begin` and `harness check --stack`: a swarm run by hand with plain
`locust --headless` against a running stack gets the same run directory and verdict
as `harness run`, scoped to what the swarm did (the stack served a swarm before)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from webui_helpers import LOCUST, REPO, clean_env, harness

from harness.stack.local import Stack

RUN_FILES = ("settings.json", "baseline.ndjson", "export.ndjson", "final_reads.ndjson", "result.json",
             "junit.xml", "report.html")


def swarm(stack: Stack, workdir: Path, histories: Path, seconds: int = 6) -> None:
    """`locust --headless` by hand, recording into `histories`, for `seconds` of load.

    --harness-run-time, not Locust's -t: -t's clock starts before the users, and on a
    machine busy with other test workers Locust's start ate the whole run (nothing acknowledged)."""
    completed = subprocess.run(
        [str(LOCUST), "-f", str(REPO / "harness" / "locustfiles" / "timeout_replay.py"), "--headless", "-u", "6", "-r", "6",
         "--harness-run-time", str(seconds), "--harness-root", str(stack.root),
         "--harness-history-dir", str(histories)],
        cwd=workdir, env=clean_env(), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert completed.returncode in (0, 1), completed.stderr[-3000:]  # 1: some requests failed, by design


def begin(stack: Stack, workdir: Path) -> Path:
    began = harness("swarm", "begin", "timeout_replay", "--root", str(stack.root),
                    "--runs-dir", str(workdir / "runs"), cwd=workdir)
    assert began.returncode == 0, began.stderr
    run_dirs = sorted((workdir / "runs").iterdir(), key=lambda path: path.stat().st_mtime)
    run_dir = run_dirs[-1]
    assert str(run_dir.name) in began.stdout and "harness check --stack" in began.stdout
    return run_dir


def test_check_stack_judges_a_swarm_run_by_hand(stack: Stack, tmp_path: Path) -> None:
    run_dir = begin(stack, tmp_path)
    settings = json.loads((run_dir / "settings.json").read_text())
    assert settings["scenario"] == "timeout_replay"
    assert settings["scope"] == {"baseline": "baseline.ndjson"}
    assert settings["promised_paths"] == ["replay", "fingerprint_refusal", "tenant_refusal"]
    assert "webhook_secret" not in json.dumps(settings) and "internal_token" not in settings["stack"]

    swarm(stack, tmp_path, run_dir / "histories")
    stack.nemesis().add_toxic("app", "latency", attributes={"latency": 50})  # left on: the check heals it
    checked = harness("check", "--stack", "--root", str(stack.root), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith("PASS"), checked.stdout
    for name in RUN_FILES:
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "histories").glob("*.jsonl"))
    assert stack.nemesis().list_toxics() == []
    result = json.loads((run_dir / "result.json").read_text())
    assert result["verdict"] == "pass" and result["counts"]["operations"] > 0

    # A second swarm on the same stack is judged on its own orders only.
    second = begin(stack, tmp_path)
    assert second != run_dir
    swarm(stack, tmp_path, second / "histories")  # 6 s: 4 s acknowledged 14 (< 20) on a busy machine
    checked = harness("check", "--stack", str(second), "--root", str(stack.root), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    first_orders = json.loads((run_dir / "result.json").read_text())["counts"]["orders"]
    second_orders = json.loads((second / "result.json").read_text())["counts"]["orders"]
    export_orders = sum(1 for line in (second / "export.ndjson").read_text().splitlines()
                        if json.loads(line).get("kind") == "order")
    assert second_orders < export_orders and export_orders >= first_orders + second_orders


def test_check_stack_refuses_without_a_begun_swarm(stack: Stack, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    (bare / "histories").mkdir(parents=True)
    checked = harness("check", "--stack", str(bare), "--root", str(stack.root), cwd=tmp_path)
    assert checked.returncode == 2
    assert "harness swarm begin" in checked.stderr


def test_check_stack_needs_a_running_stack(tmp_path: Path) -> None:
    checked = harness("check", "--stack", "--root", str(tmp_path / "none"), cwd=tmp_path)
    assert checked.returncode == 2 and "no stack is running" in checked.stderr
    plain = harness("check", cwd=tmp_path)
    assert plain.returncode == 2 and "--stack" in plain.stderr


def test_whole_state_judges_a_swarm_that_was_never_begun(tmp_path: Path) -> None:
    """A locustfile run by hand against a fresh `harness up` records into
    runs/swarm-<time>-<pid>/histories by itself; --whole-state judges it without a baseline."""
    from harness.stack.local import StackSettings, start_stack

    fresh = start_stack(StackSettings(root=tmp_path / ".harness", app_workers=2, consumers=1))
    try:
        completed = subprocess.run(
            [str(LOCUST), "-f", str(REPO / "harness" / "locustfiles" / "timeout_replay.py"), "--headless", "-u", "6",
             "-r", "6", "--harness-run-time", "6", "--harness-root", str(fresh.root)],
            cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert completed.returncode in (0, 1), completed.stderr[-3000:]
        [histories] = list((tmp_path / "runs").glob("swarm-*/histories"))
        refused = harness("check", "--stack", str(histories.parent), "--root", str(fresh.root), cwd=tmp_path)
        assert refused.returncode == 2 and "--whole-state" in refused.stderr
        checked = harness("check", "--stack", str(histories), "--whole-state", "--scenario", "timeout_replay",
                          "--root", str(fresh.root), cwd=tmp_path)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        settings = json.loads((histories.parent / "settings.json").read_text())
        assert settings["whole_state"] is True and "scope" not in settings
        for name in RUN_FILES[2:]:
            assert (histories.parent / name).is_file(), name
    finally:
        fresh.down()
