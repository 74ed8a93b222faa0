"""The verdict on disk: result.json, junit.xml and a self-contained report.html.

The typed check result (harness.check.checker.CheckResult; its JSON in
docs/internals.md, "Check result") says what held; the run directory's histories,
fault log and settings (read through the `ReportFiles` it is given) say what the run looked
like, its load window and Redis readings (harness.report.run_facts) when and on what
it ran. Invariant titles come from the result, which takes them from the registry. The
history is streamed once, into per-second buckets (`harness.report.series`) and the
bounded operations of each violation's timeline (`harness.report.timeline`), so a
long run costs memory per second of run time, not per operation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from harness.check.checker import CheckResult
from harness.check.invariants import invariant_title
from harness.check.run_files import RunFileError, RunSettings
from harness.history import HistoryError, iter_operations
from harness.report.html import (
    badge,
    card_table,
    faults_table,
    invariant_violations,
    page,
    plural,
)
from harness.report.junit import write_check_junit
from harness.report.matrix import MatrixCell, format_matrix_table, write_matrix_report
from harness.report.plots import (
    FaultWindow,
    Segment,
    Series,
    horizontal_bar_chart,
    line_chart,
    stacked_bar_chart,
)
from harness.report.run_facts import LoadWindow, RedisCapture, RedisSettings, ReportFiles, redis_warnings
from harness.report.series import RunSeries, percentile
from harness.report.timeline import MAX_TIMELINES, TimelineCollector, render_timeline, subject_of

__all__ = [
    "MatrixCell",
    "ReportPaths",
    "format_matrix_table",
    "render_report",
    "summary_line",
    "write_matrix_report",
    "write_reports",
]

OP_COLORS = {"create_order": "#2563eb", "pay": "#16a34a", "webhook": "#9333ea",
             "publish": "#0891b2"}
OUTCOME_SEGMENTS = (Segment("ok", "#16a34a"), Segment("fail", "#dc2626"),
                    Segment("info", "#eab308"))
LAYER_COLORS = {"api": "#2563eb", "domain": "#16a34a", "inbox": "#0891b2",
                "webhook": "#9333ea", "history": "#94a3b8"}
# The checker adds what the clients saw beside the app's own counters.
LAYER_NAMES = {"history": "seen by clients"}
FALLBACK_COLORS = ("#475569", "#be185d", "#0d9488", "#7c2d12")


@dataclass(frozen=True)
class ReportPaths:
    result_json: Path
    junit_xml: Path
    report_html: Path


def write_reports(run: ReportFiles, result: CheckResult) -> ReportPaths:
    """Write result.json, junit.xml and report.html into the run directory (a
    `harness.run.rundir.RunDir`); their paths."""
    run.path.mkdir(parents=True, exist_ok=True)
    paths = ReportPaths(run.result, run.junit, run.report)
    run.write_result(result.to_dict())
    write_check_junit(paths.junit_xml, result)
    faults = run.read_faults(strict=False)
    try:
        settings = run.read_settings()
    except RunFileError:
        settings = None  # the report is best effort; the checker said what was wrong
    history_error = None
    timelines = timeline_collector(result)
    series = RunSeries()
    try:
        # One pass: the per-second series and the timelines' operations together.
        add = series.add
        if timelines.wants_history():
            offer = timelines.offer
            for operation in iter_operations(run.history_files()):
                add(operation)
                offer(operation)
        else:
            for operation in iter_operations(run.history_files()):
                add(operation)
    except (HistoryError, OSError) as error:
        series, history_error = RunSeries(), str(error)
        timelines = timeline_collector(result)  # the evidence alone
    html = render_report(result, series, faults, settings=settings, history_error=history_error,
                         timelines=timelines, load=run.read_load_window(), redis=run.read_redis_capture())
    run.write_text(paths.report_html, html)
    return paths


def summary_line(result: CheckResult, report_html: Path) -> str:
    """The one-line verdict for the terminal."""
    invariants = result.invariants
    counts = result.counts
    failed = [inv for inv in invariants if not inv.passed]
    interrupted = result.interrupted
    if interrupted is not None:
        # A partial run: whatever the invariants say, it is not a verdict on the app.
        return (f"INTERRUPTED ({interrupted.signal or 'killed'} during "
                f"{interrupted.phase or 'the run'}): the recorded part "
                f"{'held every invariant' if not failed else 'violated ' + ', '.join(i.name for i in failed)}"
                f" — report: {report_html}")
    if result.verdict == "inconclusive" and not failed:
        reasons = "; ".join(result.inconclusive_reasons) or "no reason given"
        return f"INCONCLUSIVE: no invariant was violated, but {reasons} — report: {report_html}"
    if result.valid and not failed:
        detail = (f"all {len(invariants)} invariants held "
                  f"({plural(counts.get('operations', 0), 'operation')}, "
                  f"{plural(counts.get('faults', 0), 'fault')})")
        return f"PASS: {detail} — report: {report_html}"
    if failed:
        detail = ", ".join(f"{inv.name} ({plural(inv.violation_count, 'violation')})" for inv in failed)
    else:
        detail = "the result is marked invalid"
    return f"FAIL: {detail} — report: {report_html}"


def timeline_collector(result: CheckResult) -> TimelineCollector:
    """The subjects of the first MAX_TIMELINES violations (in the registry's order),
    each with its evidence operations, ready to be offered the history."""
    collector = TimelineCollector()
    for inv in result.invariants:
        for violation in inv.violations if not inv.passed else ():
            if len(collector) >= MAX_TIMELINES:
                return collector
            collector.add(subject_of(violation.order_id, violation.details),
                          violation.evidence.get("operations") or ())
    return collector


def render_report(
    result: CheckResult,
    series: RunSeries,
    faults: Sequence[Mapping[str, Any]],
    *,
    settings: RunSettings | None = None,
    history_error: str | None = None,
    timelines: TimelineCollector | None = None,
    load: LoadWindow | None = None,
    redis: RedisCapture | None = None,
) -> str:
    """The whole report page as one HTML string. Without `timelines` each violation's
    timeline is drawn from its evidence alone."""
    starts = [t for t in (series.first_time, *(_num(f.get("start")) for f in faults)) if t is not None]
    ends = [t for t in (series.last_time, *(_num(f.get("end")) for f in faults)) if t is not None]
    start = math.floor(min(starts)) if starts else 0
    duration = max(max(ends, default=start) - start, 0.0)
    windows = [_window(f, start, duration) for f in faults if _num(f.get("start")) is not None]
    run_id = result.run_id or "run"
    body = [
        f"<h1>Idempotency chaos report · <span class='mono'>{escape(run_id)}</span></h1>",
        _verdict(result, settings, duration, len(faults), load),
        _warnings(redis),
        _invariants(result),
    ]
    if history_error:
        body.append(f"<p class='badge warn'>history unreadable: {escape(history_error)}</p>")
    body.append("<h2>Over time</h2>")
    body += [_card(chart) for chart in _time_charts(series, start, duration, windows)]
    body.append("<h2>Outcomes and layers</h2>")
    body.append(_card(_outcomes_chart(result, series)))
    body.append(_card(_layers_chart(result)))
    body.append(_operations_table(series))
    body.append(_faults_table(faults, start))
    body.append(_paths(result))
    body.append(_dead_letters(result))
    body.append(_jepsen(result))
    body.append(_duplicates(result))
    body.append(_redis_settings(redis))
    body.append(invariant_violations(result.invariants, start,
                                     timeline=_timelines(result, timelines, faults, start)))
    return page(f"{result.verdict.upper()} · {run_id}", "".join(body))


def _timelines(result: CheckResult, timelines: TimelineCollector | None,
               faults: Sequence[Mapping[str, Any]], start: float) -> Callable[[str, int], str]:
    """(invariant, violation index) -> that violation's timeline SVG ('' past the bound)."""
    collector = timelines if timelines is not None else timeline_collector(result)
    slots: dict[tuple[str, int], tuple[int, Mapping[str, Any]]] = {}
    for inv in result.invariants:
        for index, violation in enumerate(inv.violations if not inv.passed else ()):
            if len(slots) >= len(collector):
                break
            slots[(inv.name, index)] = (len(slots), violation.evidence)

    def draw(name: str, index: int) -> str:
        slot = slots.get((name, index))
        if slot is None:
            return ""
        number, evidence = slot
        return render_timeline(collector.subject(number), collector.operations(number), faults, start,
                               payments=_records(evidence.get("payments")), effects=_records(evidence.get("effects")),
                               evidence_ids=collector.evidence_ids(number))
    return draw


def _records(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _warnings(redis: RedisCapture | None) -> str:
    """Why the stack may have failed the run: Redis settings that make idempotency
    records disposable (harness.report.run_facts.redis_warnings)."""
    warnings = redis_warnings(redis) if redis is not None else []
    if not warnings:
        return ""
    items = "".join(f"<p class='warning' data-warning='redis'>{badge('WARNING', 'warn')} {escape(text)}</p>"
                    for text in warnings)
    return (f"<section id='warnings' class='card warnings'><h3>The stack may have caused this verdict</h3>"
            f"{items}</section>")


def _redis_settings(redis: RedisCapture | None) -> str:
    title = "<h2>Stack: Redis settings</h2>"
    if redis is None or (redis.before is None and redis.after is None):
        return title + "<p class='note'>not recorded for this run</p>"
    readings = [("before the load", redis.before), ("after the run", redis.after)]

    def cell(reading: RedisSettings | None, key: str) -> str:
        if reading is None:
            return "<span class='note'>not read</span>"
        if reading.error is not None:
            return f"<span class='note'>unreadable: {escape(reading.error)}</span>" if key == "maxmemory" else ""
        value = getattr(reading, key)
        if value is None:
            return "<span class='note'>–</span>"
        if isinstance(value, bool):
            return "yes" if value else "no"
        if key == "save" and value == "":
            return "<code>\"\"</code> <span class='note'>(no RDB snapshots)</span>"
        if key == "maxmemory" and value == 0:
            return "0 <span class='note'>(no limit)</span>"
        return f"<code>{escape(str(value))}</code>"

    rows = "".join(
        f"<tr data-setting='{key}'><th>{label}</th>" + "".join(f"<td>{cell(r, key)}</td>" for _, r in readings)
        + "</tr>"
        for key, label in (("maxmemory", "maxmemory"), ("maxmemory_policy", "maxmemory-policy"),
                           ("appendonly", "appendonly"), ("save", "save"), ("evicted_keys", "evicted_keys")))
    head = "<th></th>" + "".join(f"<th>{label}</th>" for label, _ in readings)
    return title + card_table(head, rows)


def _verdict(result: CheckResult, settings: RunSettings | None, duration: float, fault_count: int,
             load: LoadWindow | None = None) -> str:
    verdict = result.verdict
    invariants = result.invariants
    failed = [inv for inv in invariants if not inv.passed]
    counts = result.counts
    if verdict == "pass":
        headline = f"all {len(invariants)} invariants held"
    elif verdict == "inconclusive":
        headline = (f"all {len(invariants)} invariants held, but the run proved too little: "
                    + "; ".join(result.inconclusive_reasons))
    else:
        headline = f"{len(failed)} of {len(invariants)} invariants violated"
        if failed:
            headline += ": " + ", ".join(inv.name for inv in failed)
    interrupted = result.interrupted
    if interrupted is not None:
        headline = (f"INTERRUPTED by {interrupted.signal or 'a kill'} during "
                    f"{interrupted.phase or 'the run'}; this judges only what was "
                    f"recorded before: {headline}")
    facts: list[tuple[str, str]] = [("scenario", result.scenario or "–")]
    if result.unsafe_disable:
        facts.append(("unsafe_disable (mutant)", ", ".join(result.unsafe_disable)))
    facts.append(("duration", f"{duration:.1f} s"))
    facts.append(("operations", _count(counts.get("operations", 0))))
    if "acknowledged" in counts:
        facts.append(("acknowledged", _count(counts["acknowledged"])))
    if load is not None and load.started is not None and load.stopped is not None:
        facts.append(("load window", f"{load.stopped - load.started:.1f} s"))
        if load.healed is not None:
            facts.append(("healed after the load", f"+{load.healed - load.stopped:.1f} s"))
    facts.append(("faults", str(counts.get("faults", fault_count))))
    for key in ("orders", "payments"):
        if key in counts:
            facts.append((key, _count(counts[key])))
    if settings is not None and settings.users is not None:
        facts.append(("users", str(settings.users)))
    if settings is not None and settings.seed is not None:
        facts.append(("seed", str(settings.seed)))
    items = "".join(
        f"<div><dt>{escape(k)}</dt><dd>"
        + (f"<span class='mutant'>{escape(v)}</span>" if k.startswith("unsafe") else escape(v))
        + "</dd></div>"
        for k, v in facts)
    return (
        f"<section id='verdict' class='verdict {verdict}' "
        f"data-valid='{'true' if verdict == 'pass' else 'false'}' data-verdict='{verdict}'>"
        f"<span class='word'>{verdict.upper()}</span>"
        f"<span class='headline'>{escape(headline)}</span><dl>{items}</dl></section>"
    )


def _invariants(result: CheckResult) -> str:
    rows = []
    for inv in result.invariants:
        name = inv.name
        # The registry's title; a result.json of another version keeps its own.
        title = inv.title or invariant_title(name)
        link = escape(name) if inv.passed else f"<a href='#inv-{escape(name)}'>{escape(name)}</a>"
        rows.append(
            f"<tr class='{'passed' if inv.passed else 'failed'}' data-invariant='{escape(name)}'>"
            f"<td>{badge('PASS', 'pass') if inv.passed else badge('FAIL', 'fail')}</td>"
            f"<td><strong>{escape(title)}</strong><br>"
            f"<span class='mono note'>{link}</span></td>"
            f"<td class='num'>{escape(str(inv.checked))}</td>"
            f"<td class='num'>{escape(str(inv.violation_count))}</td></tr>")
    return (
        "<section class='card'><h2 style='margin-top:0'>Invariants</h2><table><thead><tr>"
        "<th></th><th>invariant</th><th class='num'>checked</th>"
        f"<th class='num'>violations</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        "</section>")


def _time_charts(series: RunSeries, start: int, duration: float,
                 windows: Sequence[FaultWindow]) -> list[str]:
    rows = series.resampled(start, start + duration) if series.operations else []
    ops = series.op_names()
    throughput = [
        Series(op, OP_COLORS.get(op, FALLBACK_COLORS[i % len(FALLBACK_COLORS)]),
               [(x, b.ok.get(op, 0) / w) for x, w, b in rows])
        for i, op in enumerate(ops)]
    latency = [
        Series("p50", "#2563eb", [(x, percentile(b.latency, 0.50)) for x, _, b in rows]),
        Series("p99", "#db2777", [(x, percentile(b.latency, 0.99)) for x, _, b in rows]),
    ]
    errors = [
        Series("fail", "#dc2626", [(x, b.fail / w) for x, w, b in rows]),
        Series("info", "#ca8a04", [(x, b.info / w) for x, w, b in rows]),
    ]
    return [
        line_chart("throughput", "Throughput: acknowledged (ok) operations per second",
                   throughput, duration=duration, windows=windows, y_label="ops/s"),
        line_chart("latency", "Latency p50 and p99 (ms), by completion second",
                   latency, duration=duration, windows=windows, y_label="ms"),
        line_chart("errors", "Errors per second: fail (rejected) and info (indeterminate)",
                   errors, duration=duration, windows=windows, y_label="per second"),
    ]


def _outcomes_chart(result: CheckResult, series: RunSeries) -> str:
    outcomes = result.outcomes or {
        op: {"ok": s.ok, "fail": s.fail, "info": s.info} for op, s in series.ops.items()}
    known = ("create_order", "pay", "webhook", "publish")
    ordered = sorted(outcomes, key=lambda op: (known.index(op) if op in known else 9, op))
    bars = {op: {k: _num(v) or 0.0 for k, v in (outcomes[op] or {}).items()} for op in ordered}
    return stacked_bar_chart("outcomes", "Outcomes per operation type (ok / fail / info)", bars,
                             OUTCOME_SEGMENTS, empty_note="no operations recorded")


def _layers_chart(result: CheckResult) -> str:
    rows: list[tuple[str, float, str]] = []
    legend: list[tuple[str, str]] = []
    for index, (layer, counters) in enumerate(result.layers.items()):
        color = LAYER_COLORS.get(layer, FALLBACK_COLORS[index % len(FALLBACK_COLORS)])
        name = LAYER_NAMES.get(str(layer), str(layer))
        legend.append((name, color))
        for counter, value in (counters or {}).items():
            rows.append((f"{name} · {str(counter).replace('_', ' ')}", _num(value) or 0.0, color))
    return horizontal_bar_chart("layers", "Duplicates stopped per layer", rows, legend=legend,
                                empty_note="no duplicates stopped")


def _operations_table(series: RunSeries) -> str:
    if not series.ops:
        return "<section class='card'><h3>Operations</h3><p class='note'>none recorded</p></section>"
    rows = []
    for op in series.op_names():
        s = series.ops[op]
        p50, p99 = percentile(s.latency, 0.5), percentile(s.latency, 0.99)
        cells = [s.ok + s.fail + s.info, s.ok, s.fail, s.info,
                 f"{p50:.1f}" if p50 is not None else "–", f"{p99:.1f}" if p99 is not None else "–"]
        rows.append(f"<tr><td><code>{escape(op)}</code></td>"
                    + "".join(f"<td class='num'>{escape(str(c))}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th class='num'>{h}</th>" for h in
                   ("total", "ok", "fail", "info", "p50 ms", "p99 ms"))
    return (f"<section class='card'><h3>Operations (from the history)</h3><table><thead><tr>"
            f"<th>operation</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></section>")


def _faults_table(faults: Sequence[Mapping[str, Any]], start: float) -> str:
    if not faults:
        return "<section class='card'><h3>Faults</h3><p class='note'>no faults applied</p></section>"
    table = faults_table(faults, start)
    return f"<section class='card'><h3>Faults ({len(faults)})</h3>{table}</section>"


def _paths(result: CheckResult) -> str:
    """How often each protective path ran, and which ones the run promised."""
    paths = result.paths
    if not paths:
        return "<h2>Protective paths</h2><p class='note'>not reported</p>"
    promised = set(result.promised_paths)
    rows = []
    for name, count in paths.items():
        missing = str(name) in promised and not _num(count)
        mark = badge("NOT EXERCISED", "warn") if missing else (
            badge("promised", "pass") if str(name) in promised else "")
        rows.append(f"<tr data-path='{escape(str(name))}'><td><code>{escape(str(name))}</code></td>"
                    f"<td class='num'>{escape(_count(count))}</td><td>{mark}</td></tr>")
    return ("<h2>Protective paths</h2><p class='note'>how often each protective path of the "
            "three layers ran in this run; a path the scenario or plan promised that ran zero "
            "times makes the run inconclusive.</p>"
            + card_table("<th>path</th><th class='num'>times</th><th></th>", "".join(rows)))


def _dead_letters(result: CheckResult) -> str:
    dead = result.dead_letters
    reasons, listed = dead.reasons, dead.first
    if not reasons and not listed:
        return "<h2>Dead letters</h2><p class='note'>none</p>"
    reason_rows = "".join(f"<tr><td>{escape(str(reason))}</td><td class='num'>{escape(_count(n))}</td></tr>"
                          for reason, n in sorted(reasons.items(), key=lambda kv: str(kv[0])))
    columns = ("message_id", "order_id", "provider_ref", "reason", "deliveries", "valid")
    entry_rows = "".join(
        "<tr>" + "".join(f"<td class='mono'>{escape(str(entry.get(c, '')))}</td>" for c in columns) + "</tr>"
        for entry in listed if isinstance(entry, Mapping))
    head = "".join(f"<th>{c}</th>" for c in columns)
    return ("<h2>Dead letters</h2><section class='card'><table><thead><tr><th>reason</th>"
            f"<th class='num'>messages</th></tr></thead><tbody>{reason_rows}</tbody></table>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{entry_rows}</tbody></table></section>")


def _jepsen(result: CheckResult) -> str:
    jepsen = result.jepsen
    bad = {"lost", "unexpected"}
    tiles = "".join(
        f"<div class='stat{' bad' if k in bad and (_num(v) or 0) > 0 else ''}'>"
        f"<div class='value'>{escape(str(v))}</div>"
        f"<div class='label'>{escape(str(k).replace('_', ' '))}</div></div>"
        for k, v in jepsen.items())
    return (
        "<h2>Acknowledged payments (Jepsen set semantics)</h2>"
        "<p class='note'>lost = acknowledged but missing; unexpected = applied but never "
        "attempted; recovered = indeterminate (info) and applied, which is allowed.</p>"
        f"<div class='grid'>{tiles or '<p class=note>not reported</p>'}</div>")


def _duplicates(result: CheckResult) -> str:
    duplicates = result.duplicates
    if not duplicates:
        return "<h2>Duplicates provoked</h2><p class='note'>none recorded</p>"
    ordered = sorted(duplicates.items(), key=lambda kv: (-(_num(kv[1]) or 0), str(kv[0])))
    rows = "".join(f"<tr><td><code>{escape(str(k))}</code></td>"
                   f"<td class='num'>{escape(str(v))}</td></tr>" for k, v in ordered)
    return "<h2>Duplicates provoked</h2>" + card_table(
        "<th>kind (the client's <code>expect</code>)</th><th class='num'>operations</th>", rows)


def _card(content: str) -> str:
    return f"<div class='plot-card'>{content}</div>"


def _window(fault: Mapping[str, Any], start: float, duration: float) -> FaultWindow:
    begin = (_num(fault.get("start")) or start) - start
    end = _num(fault.get("end"))
    finish = end - start if end is not None else duration
    name = str(fault.get("name") or fault.get("type") or "fault")
    target = fault.get("target")
    label = f"{name} @ {target}" if target else name
    hits = fault.get("hits")
    if isinstance(hits, int) and not isinstance(hits, bool):
        label += f" ({plural(hits, 'hit')})"
    detail = " ".join(str(fault[k]) for k in ("kind", "type", "action") if fault.get(k))
    return FaultWindow(begin, max(finish, begin), label, detail)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)
