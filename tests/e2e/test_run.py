"""`harness run` and `harness matrix` as users run them."""

from __future__ import annotations

import json
from pathlib import Path

from e2e_helpers import harness


def test_runs_against_a_stack_left_by_up_judge_only_themselves(tmp_path: Path) -> None:
    assert harness("up", "--app-workers", "2", "--consumers", "2", cwd=tmp_path).code == 0
    try:
        first = harness("run", "duplicate_webhooks", "--users", "4", "--duration", "4s", cwd=tmp_path)
        second = harness("run", "mixed", "--users", "4", "--duration", "4s", cwd=tmp_path)
        status = harness("status", "--json", cwd=tmp_path)
    finally:
        harness("down", cwd=tmp_path)
    assert first.code == 0, first.stdout + first.stderr[-2000:]
    assert second.code == 0, second.stdout + second.stderr[-2000:]
    assert "using the running stack" in second.stderr
    assert all(service["healthy"] for service in json.loads(status.stdout)["services"])
    run_dirs = sorted((tmp_path / "runs").iterdir())
    settings = json.loads((run_dirs[1] / "settings.json").read_text())
    # the second run is judged against the state the first one left, not by clocks
    assert settings["scope"]["baseline"] == "baseline.ndjson"
    assert (run_dirs[1] / "baseline.ndjson").stat().st_size > 0
    assert list((run_dirs[1] / "logs").glob("*.log"))


def test_a_run_that_proves_too_little_is_inconclusive_with_exit_3(tmp_path: Path) -> None:
    result = harness("run", "timeout_replay", "--users", "2", "--duration", "2s", "--app-workers", "2",
                     "--min-acknowledged", "100000", cwd=tmp_path)
    assert result.code == 3, result.stdout + result.stderr[-2000:]
    assert result.stdout.startswith("INCONCLUSIVE:") and "100000" in result.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "result.json").read_text())["verdict"] == "inconclusive"
    assert "Inconclusive" in (run_dir / "junit.xml").read_text()
    assert "data-verdict='inconclusive'" in (run_dir / "report.html").read_text()


def test_a_fault_that_cannot_be_applied_is_a_harness_failure(tmp_path: Path) -> None:
    plan = tmp_path / "ghost.yaml"
    plan.write_text(
        "seed: 1\nwindows:\n"
        "  - {at: 1s, for: 1s, toxic: {proxy: ghost, type: latency, attributes: {latency: 10}}}\n"
    )
    result = harness("run", "mixed", "--users", "2", "--duration", "3s", "--plan", str(plan), cwd=tmp_path)
    assert result.code == 2, result.stdout + result.stderr
    assert "ghost" in result.stderr.strip().splitlines()[-1]


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args in (["run", "nope"], ["run", "mixed", "--duration", "soon"],
                 ["run", "mixed", "--unsafe-disable", "everything"], ["matrix", "--mutants", "bogus"]):
        result = harness(*args, cwd=tmp_path)
        assert result.code == 2, args
        assert len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_the_matrix_shows_which_scenario_catches_which_layer(tmp_path: Path) -> None:
    result = harness("matrix", "--mutants", "none,domain", "--scenarios", "duplicate_webhooks",
                     "--duration", "4s", "--users", "4", "--app-workers", "2", cwd=tmp_path)
    assert result.code == 0, result.stdout + result.stderr[-2000:]
    assert "one_payment_per_order" in result.stdout
    html = (tmp_path / "runs" / "matrix.html").read_text()
    assert "domain" in html and "duplicate_webhooks" in html
