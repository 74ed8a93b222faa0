"""`--json` on the verdict commands: one JSON document on stdout, people's text on stderr.

`check` on saved runs is fast; one real `harness run --json` (2 users, 3 s) is slow.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from saved_runs import saved_run

from harness.cli.run_commands import matrix_document, smoke_document, verdict_for
from harness.exit_codes import EXIT_HARNESS, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_VIOLATION
from harness.report.matrix import MatrixCell
from harness.run.runner import RunOutcome
from harness.run.smoke import SmokeStep
from tests.support.cli import clean_env, run_harness

CHECKOUT = Path(__file__).resolve().parents[2]


def _harness(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH: this checkout's harness, wherever the test runs.
    return run_harness(*args, cwd=cwd, env=clean_env(PYTHONPATH=str(CHECKOUT)), timeout=timeout)


def _invariant(document: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [entry for entry in document["invariants"] if entry["name"] == name]
    assert len(found) == 1, document["invariants"]
    return found[0]


def test_check_json_of_a_passing_run(tmp_path: Path) -> None:
    run_dir = saved_run(tmp_path)
    completed = _harness("check", str(run_dir), "--json", cwd=tmp_path)
    assert completed.returncode == EXIT_OK, completed.stderr
    document = json.loads(completed.stdout)  # stdout is the document and nothing else
    assert (document["command"], document["verdict"], document["exit_code"]) == ("check", "pass", 0)
    assert document["run_dir"] == str(run_dir)
    assert _invariant(document, "one_payment_per_order") == {
        "name": "one_payment_per_order", "passed": True, "violation_count": 0}
    for key, name in (("result_json", "result.json"), ("junit_xml", "junit.xml"), ("report_html", "report.html")):
        assert document["reports"][key] == str(run_dir / name) and (run_dir / name).is_file()
    assert json.loads((run_dir / "result.json").read_text())["verdict"] == "pass"
    # The summary a person reads is on stderr only.
    assert document["summary"].startswith("PASS") and document["summary"] in completed.stderr


def test_check_json_of_a_violation_counts_it(tmp_path: Path) -> None:
    completed = _harness("check", str(saved_run(tmp_path, paid_twice=True)), "--json", cwd=tmp_path)
    assert completed.returncode == EXIT_VIOLATION
    document = json.loads(completed.stdout)
    assert (document["verdict"], document["exit_code"]) == ("fail", 1)
    assert _invariant(document, "one_payment_per_order") == {
        "name": "one_payment_per_order", "passed": False, "violation_count": 1}


def test_check_json_of_a_harness_failure_is_an_error_document(tmp_path: Path) -> None:
    completed = _harness("check", str(tmp_path / "no-such-run"), "--json", cwd=tmp_path)
    assert completed.returncode == EXIT_HARNESS
    assert json.loads(completed.stdout) == {"command": "check", "verdict": "error", "exit_code": 2,
                                            "error": f"{tmp_path / 'no-such-run'} is not a run directory"}
    assert completed.stderr.startswith("harness: ") and completed.stderr.count("\n") == 1


def test_without_json_the_summary_stays_on_stdout(tmp_path: Path) -> None:
    completed = _harness("check", str(saved_run(tmp_path)), cwd=tmp_path)
    assert completed.returncode == EXIT_OK
    assert completed.stdout.startswith("PASS: ") and completed.stdout.count("\n") == 1


def test_verdict_words_follow_the_exit_codes() -> None:
    assert [verdict_for(code) for code in (EXIT_OK, EXIT_VIOLATION, EXIT_HARNESS, EXIT_INCONCLUSIVE, 130)] == [
        "pass", "fail", "error", "inconclusive", "error"]


def test_smoke_and_matrix_documents_have_one_entry_per_step_and_cell(tmp_path: Path) -> None:
    from harness.run.runner import check_saved_run

    caught = check_saved_run(saved_run(tmp_path, paid_twice=True))
    missed = check_saved_run(saved_run(tmp_path / "shorter"))
    assert isinstance(caught, RunOutcome) and isinstance(missed, RunOutcome)
    steps = [SmokeStep("mutant domain / duplicate_webhooks", True, caught, None, "one_payment_per_order",
                       earlier=(missed,)),
             SmokeStep("timeout_replay", False, None, "the stack would not start")]
    smoke = json.loads(json.dumps(smoke_document(steps, EXIT_HARNESS)))
    assert (smoke["command"], smoke["verdict"], smoke["exit_code"]) == ("smoke", "error", 2)
    first, second = smoke["steps"]
    assert first["passed"] and "one_payment_per_order" in first["caught_by"]
    assert first["run"]["verdict"] == "fail" and first["run"]["run_dir"] == str(caught.run_dir)
    # the run before it, with less load, that did not catch it: kept, not hidden
    assert [(run["verdict"], run["run_dir"]) for run in first["earlier_runs"]] == [("pass", str(missed.run_dir))]
    assert second["earlier_runs"] == []
    assert not second["passed"] and second["run"] is None and second["error"] == "the stack would not start"

    cells = [MatrixCell("domain", "mixed", True, ["one_payment_per_order"], str(caught.run_dir)),
             MatrixCell("none", "mixed", False, [], "", error="no stack")]
    matrix = json.loads(json.dumps(matrix_document(cells, EXIT_HARNESS, tmp_path / "runs" / "matrix.html")))
    assert matrix["matrix_html"] == str(tmp_path / "runs" / "matrix.html")
    assert [(cell["mutant"], cell["caught"], cell["error"]) for cell in matrix["cells"]] == [
        ("domain", True, None), ("none", False, "no stack")]
    assert matrix["cells"][0]["result_json"] == str(caught.run_dir / "result.json")
    assert matrix["cells"][1]["run_dir"] is None


@pytest.mark.slow
def test_a_real_run_with_json(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    completed = _harness("run", "timeout_replay", "--users", "2", "--duration", "3s", "--app-workers", "2",
                         "--runs-dir", str(runs), "--root", str(tmp_path / "stack"), "--min-acknowledged", "1",
                         "--json", cwd=tmp_path, timeout=240)
    document = json.loads(completed.stdout)
    # 3 s may leave a promised path unexercised (inconclusive); nothing may be violated.
    assert completed.returncode == document["exit_code"], completed.stderr[-3000:]
    assert (document["verdict"], document["exit_code"]) in (("pass", EXIT_OK), ("inconclusive", EXIT_INCONCLUSIVE))
    assert document["scenario"] == "timeout_replay"
    run_dir = Path(document["run_dir"])
    assert run_dir.parent == runs
    assert json.loads((run_dir / "result.json").read_text())["verdict"] == document["verdict"]
    assert len(document["invariants"]) >= 12 and all(entry["passed"] for entry in document["invariants"])
    assert document["reports"]["report_html"] == str(run_dir / "report.html")
    assert document["summary"] in completed.stderr  # the summary is for people: stderr
