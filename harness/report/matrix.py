"""The mutant matrix: which scenario catches which deliberately broken layer.

Rows are mutants (`none` is the correct app), columns scenarios. For a mutant,
"caught" is the good outcome: the checker noticed the missing layer. For `none`,
"caught" is a false alarm and is shown as a failure. A mutant no scenario catches
is the worst finding of all: the harness would report green for a broken app.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from harness.catalog import MUTANTS, SCENARIOS
from harness.report.html import badge, page

# Rows: the correct app first, then each mutant; columns: the scenarios.
MUTANT_ORDER = ("none", *MUTANTS)
SCENARIO_ORDER = SCENARIOS


@dataclass(frozen=True)
class MatrixCell:
    mutant: str
    scenario: str
    caught: bool
    invariants: list[str]
    run_dir: str
    error: str | None = None
    # the run violated nothing but proved too little (a promised path never ran)
    inconclusive: bool = False
    report: str = ""  # the run's report.html, linked from the cell ("" when none was written)


def _ordered(values: Sequence[str], preferred: Sequence[str]) -> list[str]:
    present = list(dict.fromkeys(values))
    known = [v for v in preferred if v in present]
    return known + [v for v in present if v not in preferred]


def _grid(
    matrix: Sequence[MatrixCell],
) -> tuple[list[str], list[str], dict[tuple[str, str], MatrixCell]]:
    mutants = _ordered([c.mutant for c in matrix], MUTANT_ORDER)
    scenarios = _ordered([c.scenario for c in matrix], SCENARIO_ORDER)
    return mutants, scenarios, {(c.mutant, c.scenario): c for c in matrix}


def cell_status(cell: MatrixCell) -> str:
    """`error`, `false_alarm`, `inconclusive`, `pass` (correct app, green), `caught` or `missed`."""
    if cell.error is not None:
        return "error"
    if cell.mutant == "none":
        if cell.caught:
            return "false_alarm"
        return "inconclusive" if cell.inconclusive else "pass"
    return "caught" if cell.caught else "missed"


def _cell_text(cell: MatrixCell | None) -> str:
    if cell is None:
        return "(not run)"
    status = cell_status(cell)
    names = list(cell.invariants)
    shown = names[0] + (f" +{len(names) - 1}" if len(names) > 1 else "") if names else ""
    if status == "error":
        return "ERROR"
    if status == "pass":
        return "pass"
    if status == "inconclusive":
        return "INCONCLUSIVE"
    if status == "false_alarm":
        return f"FALSE ALARM: {shown}".rstrip(": ")
    if status == "caught":
        return f"caught: {shown}".rstrip(": ")
    return "not caught"


def mutant_summary(mutant: str, cells: Sequence[MatrixCell]) -> str:
    statuses = [cell_status(c) for c in cells]
    if "error" in statuses:
        return "harness error"
    if mutant == "none":
        return "false alarm!" if "false_alarm" in statuses else "green (correct)"
    caught = statuses.count("caught")
    return f"caught by {caught}/{len(cells)}" if caught else "NEVER CAUGHT"


def matrix_problems(matrix: Sequence[MatrixCell]) -> list[str]:
    """What makes the matrix red: false alarms, harness errors, mutants never caught."""
    problems = [f"false alarm: {c.scenario} on the correct app"
                for c in matrix if cell_status(c) == "false_alarm"]
    problems += [f"harness error: {c.mutant} × {c.scenario}"
                 for c in matrix if cell_status(c) == "error"]
    mutants, _, _ = _grid(matrix)
    for mutant in mutants:
        cells = [c for c in matrix if c.mutant == mutant]
        if mutant != "none" and not any(cell_status(c) == "caught" for c in cells):
            problems.append(f"{mutant} never caught")
    return problems


def format_matrix_table(matrix: Sequence[MatrixCell]) -> str:
    """A plain-text table for the terminal: mutants down, scenarios across."""
    mutants, scenarios, cells = _grid(matrix)
    header = ["mutant \\ scenario", *scenarios, "verdict"]
    rows = [header]
    for mutant in mutants:
        row_cells = [cells[(mutant, s)] for s in scenarios if (mutant, s) in cells]
        rows.append([mutant, *(_cell_text(cells.get((mutant, s))) for s in scenarios),
                     mutant_summary(mutant, row_cells)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(text.ljust(widths[i]) for i, text in enumerate(row)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    errors = [c for c in matrix if c.error is not None]
    for cell in errors:
        lines.append(f"error in {cell.mutant} × {cell.scenario}: {cell.error}")
    return "\n".join(lines)


_BADGES = {
    "pass": ("pass", "pass"),
    "caught": ("caught", "pass"),
    "false_alarm": ("FALSE ALARM", "fail"),
    "inconclusive": ("INCONCLUSIVE", "warn"),
    "missed": ("not caught", "muted"),
    "error": ("harness error", "warn"),
}


def _cell_html(cell: MatrixCell | None, base: Path) -> str:
    if cell is None:
        return "<td class='note'>not run</td>"
    status = cell_status(cell)
    text, kind = _BADGES[status]
    parts = [badge(text, kind)]
    if cell.invariants and status in ("caught", "false_alarm"):
        names = "".join(f"<li><code>{escape(n)}</code></li>" for n in cell.invariants)
        parts.append(f"<ul style='margin:4px 0 0;padding-left:18px'>{names}</ul>")
    if cell.error:
        parts.append(f"<div class='mono note'>{escape(cell.error)}</div>")
    if cell.report:
        link = _relative_link(Path(cell.report), base)
        parts.append(f"<div><a href='{escape(link)}'>report</a></div>")
    return f"<td data-mutant='{escape(cell.mutant)}' data-scenario='{escape(cell.scenario)}' " \
           f"data-status='{status}'>{''.join(parts)}</td>"


def _relative_link(target: Path, base: Path) -> str:
    try:
        return Path(os.path.relpath(target.resolve(), base.resolve())).as_posix()
    except ValueError:  # different drives on Windows
        return target.as_posix()


def matrix_html(matrix: Sequence[MatrixCell], base: Path) -> str:
    mutants, scenarios, cells = _grid(matrix)
    head = "".join(f"<th><code>{escape(s)}</code></th>" for s in scenarios)
    rows = []
    for mutant in mutants:
        row_cells = [cells[(mutant, s)] for s in scenarios if (mutant, s) in cells]
        summary = mutant_summary(mutant, row_cells)
        good = summary.startswith(("green", "caught"))
        label = "none (correct app)" if mutant == "none" else mutant
        rows.append(
            f"<tr><th><code>{escape(label)}</code></th>"
            + "".join(_cell_html(cells.get((mutant, s)), base) for s in scenarios)
            + f"<td style='white-space:nowrap'>{badge(summary, 'pass' if good else 'fail')}"
            "</td></tr>")
    problems = matrix_problems(matrix)
    valid = not problems
    verdict = "every mutant caught, no false alarm" if valid else "; ".join(problems)
    return (
        f"<section id='verdict' class='verdict {'pass' if valid else 'fail'}' "
        f"data-valid='{'true' if valid else 'false'}'><span class='word'>"
        f"{'PASS' if valid else 'FAIL'}</span><span class='headline'>{escape(verdict)}</span>"
        "</section><section class='card'><h2 style='margin-top:0'>Mutants × scenarios</h2>"
        "<p class='note'>A mutant runs the app with one layer disabled "
        "(<code>TARGET_APP_UNSAFE_DISABLE</code>). For mutants, <em>caught</em> is good; for "
        "the correct app, any caught invariant is a false alarm.</p>"
        f"<table id='matrix'><thead><tr><th>mutant</th>{head}<th>verdict</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


def write_matrix_report(path: Path, matrix: Sequence[MatrixCell]) -> None:
    """An HTML page with the matrix, each cell linking to its run's report."""
    path = Path(path)
    body = "<h1>Idempotency chaos · mutant matrix</h1>" + matrix_html(matrix, path.parent)
    body += ("<details class='more'><summary>plain-text table</summary><pre class='mono scroll'>"
             f"{escape(format_matrix_table(matrix))}</pre></details>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page("Mutant matrix", body), encoding="utf-8")
