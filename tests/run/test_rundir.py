"""RunDir and RunSettings: the one layout of a run directory, and settings.json as a value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.run.rundir import CleanupFailure, RunDir, RunDirError, RunScope, RunSettings


def test_settings_round_trip_through_the_file_and_keep_unknown_keys(tmp_path: Path) -> None:
    run_dir = RunDir.create(tmp_path, "r1")
    settings = RunSettings(run_id="r1", scenario="mixed", unsafe_disable=("domain",), users=5, seed=7,
                           duration=3.0, promised_paths=("replay",), min_acknowledged=4,
                           spec={"users": 5}, stack={"app_url": "http://x"}, started_at=1.5,
                           scope=RunScope("baseline.ndjson", {"api_replays": 2}), extra={"note": "kept"})
    run_dir.write_settings(settings)
    data = json.loads(run_dir.settings.read_text())
    assert data["users"] == 5 and data["seed"] == 7 and data["note"] == "kept"
    assert data["scope"] == {"baseline": "baseline.ndjson", "counters_before": {"api_replays": 2}}
    assert run_dir.read_settings() == settings


@pytest.mark.parametrize(("values", "named"), [
    ({"promised_paths": "replay"}, "promised_paths"),
    ({"min_acknowledged": -1}, "min_acknowledged"),
    ({"min_acknowledged": True}, "min_acknowledged"),
    ({"users": "many"}, "users"),
    ({"unsafe_disable": [1]}, "unsafe_disable"),
    ({"scope": {"since": 15.0}}, "scope without a baseline"),
])
def test_a_bad_settings_value_is_one_error_naming_it(tmp_path: Path, values: dict[str, object], named: str) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.settings.write_text(json.dumps({"run_id": "r", "scenario": "mixed", **values}))
    with pytest.raises(RunDirError, match=named):
        run_dir.read_settings()


def test_no_settings_is_none_and_a_comma_list_of_mutants_still_reads(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    assert run_dir.read_settings() is None
    run_dir.settings.write_text(json.dumps({"scenario": "mixed", "unsafe_disable": "api, domain"}))
    settings = run_dir.read_settings()
    assert settings is not None
    assert settings.unsafe_disable == ("api", "domain") and settings.run_id == tmp_path.name


def test_a_run_directory_is_created_once(tmp_path: Path) -> None:
    run_dir = RunDir.create(tmp_path, "r1")
    assert run_dir.histories.is_dir() and run_dir.path == tmp_path / "r1"
    with pytest.raises(RunDirError, match="already exists"):
        RunDir.create(tmp_path, "r1")


def test_the_fault_log_is_strict_for_the_checker_and_lenient_for_the_report(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    assert run_dir.read_faults() == []
    run_dir.faults.write_text('{"name": "a"}\nnot json\n')
    assert run_dir.read_faults(strict=False) == [{"name": "a"}]
    with pytest.raises(RunDirError, match="faults.jsonl"):
        run_dir.read_faults()


def test_cleanup_failures_are_appended_and_read_back(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.record_cleanup_errors([CleanupFailure("heal every fault", "proxy app still disabled", 1.0)])
    run_dir.record_cleanup_errors([CleanupFailure("resume consumer-1", "no such process", 2.0)])
    assert [f.step for f in run_dir.read_cleanup_errors()] == ["heal every fault", "resume consumer-1"]
