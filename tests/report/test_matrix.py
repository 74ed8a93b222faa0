"""The mutant × scenario matrix: terminal table and HTML page."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from html_probe import Probe

from harness.report.run_report import MatrixCell, format_matrix_table, write_matrix_report
from harness.run.rundir import RunDir

SCENARIOS = ("timeout_replay", "duplicate_webhooks", "redelivered_messages", "mixed")
CATCHES = {  # mutant -> scenario -> invariants that caught it
    "api": {"timeout_replay": ["one_order_per_key", "replay_fidelity"]},
    "domain": {"duplicate_webhooks": ["one_payment_per_order"],
               "mixed": ["one_payment_per_order"]},
    "inbox": {"redelivered_messages": ["message_effects_once"]},
    "inbox-nonatomic": {"redelivered_messages": ["message_effects_once"]},
}


def full_matrix(tmp_path: Path) -> list[MatrixCell]:
    cells = []
    # Deliberately out of order: the report sorts rows and columns itself.
    for mutant in ("inbox-nonatomic", "domain", "none", "inbox", "api"):
        for scenario in reversed(SCENARIOS):
            invariants = CATCHES.get(mutant, {}).get(scenario, [])
            run_dir = tmp_path / "runs" / f"{mutant}-{scenario}"
            cells.append(MatrixCell(mutant, scenario, bool(invariants), invariants, str(run_dir),
                                    report=str(RunDir(run_dir).report)))
    return cells


def test_table_rows_and_columns_in_order(tmp_path: Path) -> None:
    table = format_matrix_table(full_matrix(tmp_path))
    lines = table.splitlines()
    header = lines[0]
    positions = [header.index(s) for s in SCENARIOS]
    assert positions == sorted(positions)
    rows = [line.split()[0] for line in lines[2:]]
    assert rows == ["none", "api", "domain", "inbox", "inbox-nonatomic"]
    none_row, api_row = lines[2], lines[3]
    assert "FALSE ALARM" not in none_row and none_row.count("pass") == 4
    assert "green (correct)" in none_row
    assert "caught: one_order_per_key +1" in api_row and "caught by 1/4" in api_row
    assert "caught by 2/4" in lines[4]


def test_false_alarm_and_uncaught_mutant_are_failures(tmp_path: Path) -> None:
    cells = [c for c in full_matrix(tmp_path) if c.mutant != "inbox"]
    cells.append(MatrixCell("none", "bonus", True, ["replay_fidelity"], "runs/x"))
    cells += [MatrixCell("inbox", s, False, [], "") for s in SCENARIOS]
    table = format_matrix_table(cells)
    assert "FALSE ALARM: replay_fidelity" in table
    assert "false alarm!" in table
    inbox_row = next(line for line in table.splitlines() if line.startswith("inbox "))
    assert "NEVER CAUGHT" in inbox_row

    path = tmp_path / "matrix.html"
    write_matrix_report(path, cells)
    probe = Probe(path.read_text())
    assert probe.find(id="verdict")[0]["data-valid"] == "false"
    [alarm] = probe.find("td", data_mutant="none", data_scenario="bonus")
    assert alarm["data-status"] == "false_alarm"
    assert len(probe.find("td", data_mutant="inbox", data_status="missed")) == 4
    assert "inbox never caught" in probe.all_text
    assert "false alarm: bonus on the correct app" in probe.all_text


def test_matrix_report_page(tmp_path: Path) -> None:
    path = tmp_path / "out" / "matrix.html"
    write_matrix_report(path, full_matrix(tmp_path))
    document = path.read_text()
    probe = Probe(document)
    assert probe.find(id="verdict")[0]["data-valid"] == "true"
    assert len(probe.find("td", data_status="pass")) == 4  # the correct app, all green
    [caught] = probe.find("td", data_mutant="domain", data_scenario="mixed")
    assert caught["data-status"] == "caught"
    assert "one_payment_per_order" in probe.all_text
    links = {a["href"] for a in probe.find("a")}
    assert "../runs/domain-mixed/report.html" in links


def test_errors_and_hostile_text(tmp_path: Path) -> None:
    cells = [MatrixCell("<script>x</script>", "mixed", False, [], "",
                        error="stack would not start: <b>boom</b>")]
    table = format_matrix_table(cells)
    assert "ERROR" in table and "stack would not start" in table
    path = tmp_path / "matrix.html"
    write_matrix_report(path, cells)
    document = path.read_text()
    assert "<script>x" not in document and "<b>boom" not in document
    probe = Probe(document)
    assert probe.find(id="verdict")[0]["data-valid"] == "false"
    assert probe.find("td", data_status="error")


def test_an_inconclusive_correct_cell_is_shown_and_keeps_the_matrix_from_green(tmp_path: Path) -> None:
    from harness.run.smoke import matrix_exit_code

    cells = full_matrix(tmp_path)
    assert matrix_exit_code(cells) == 0
    index = next(i for i, c in enumerate(cells) if c.mutant == "none" and c.scenario == "mixed")
    cells[index] = dataclasses.replace(cells[index], inconclusive=True)
    assert matrix_exit_code(cells) == 3
    none_row = next(line for line in format_matrix_table(cells).splitlines() if line.startswith("none "))
    assert "INCONCLUSIVE" in none_row
    path = tmp_path / "matrix.html"
    write_matrix_report(path, cells)
    [cell] = Probe(path.read_text()).find("td", data_mutant="none", data_scenario="mixed")
    assert cell["data-status"] == "inconclusive"
