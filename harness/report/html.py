"""HTML building blocks shared by the run report and the matrix report.

Everything here escapes its input: evidence, fault names and ids come from run
files and HTTP responses, so any string may hold markup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any, Protocol

import orjson

CSS = """
:root { --ok:#15803d; --ok-bg:#dcfce7; --bad:#b91c1c; --bad-bg:#fee2e2; --warn:#a16207;
  --warn-bg:#fef9c3; --muted:#64748b; --line:#e2e8f0; --ink:#0f172a; }
* { box-sizing: border-box; }
body { margin:0; background:#f8fafc; color:var(--ink);
  font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
main { max-width:1040px; margin:0 auto; padding:24px 20px 64px; }
h1 { font-size:20px; margin:0 0 16px; color:var(--muted); font-weight:500; }
h2 { font-size:18px; margin:32px 0 10px; }
h3 { font-size:15px; margin:18px 0 6px; }
section.card, .plot-card { background:#fff; border:1px solid var(--line); border-radius:8px;
  padding:14px 16px; margin:12px 0; }
.verdict { border-radius:10px; padding:18px 22px; color:#fff; }
.verdict.pass { background:linear-gradient(90deg,#15803d,#16a34a); }
.verdict.fail { background:linear-gradient(90deg,#991b1b,#dc2626); }
.verdict.inconclusive { background:linear-gradient(90deg,#a16207,#ca8a04); }
.verdict .word { font-size:40px; font-weight:800; letter-spacing:1px; }
.verdict .headline { font-size:17px; margin-left:14px; }
.verdict dl { display:flex; flex-wrap:wrap; gap:6px 28px; margin:12px 0 0; }
.verdict dt { font-size:11px; text-transform:uppercase; opacity:.8; }
.verdict dd { margin:0; font-size:16px; font-weight:600; }
.mutant { background:rgba(0,0,0,.25); border-radius:4px; padding:1px 7px; }
table { border-collapse:collapse; width:100%; font-size:13px; }
th, td { text-align:left; padding:5px 8px; border-bottom:1px solid var(--line);
  vertical-align:top; }
th { background:#f1f5f9; font-weight:600; white-space:nowrap; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
code, .mono { font-family:ui-monospace, "SFMono-Regular", Menlo, monospace; font-size:12px; }
td code, td.time { white-space:nowrap; }
td.wrap code, td.wrap { white-space:normal; overflow-wrap:break-word; }
td.wrap { min-width:16em; }
.scroll { overflow-x:auto; }
section.card > h3:first-child, section.card > h2:first-child { margin-top:0; }
.tag { display:inline-block; border-radius:3px; padding:0 5px; margin-left:4px; font-size:11px;
  background:#e0e7ff; color:#3730a3; }
.badge { display:inline-block; border-radius:4px; padding:1px 8px; font-weight:700;
  font-size:12px; }
.badge.pass { background:var(--ok-bg); color:var(--ok); }
.badge.fail { background:var(--bad-bg); color:var(--bad); }
.badge.warn { background:var(--warn-bg); color:var(--warn); }
.badge.muted { background:#f1f5f9; color:var(--muted); }
tr.failed td { background:#fff7f7; }
.grid { display:grid; grid-template-columns:repeat(auto-fit,minmax(150px,1fr)); gap:12px; }
.stat { background:#fff; border:1px solid var(--line); border-radius:8px; padding:10px 14px; }
.stat .value { font-size:24px; font-weight:700; }
.stat .label { color:var(--muted); font-size:12px; text-transform:uppercase; }
.stat.bad .value { color:var(--bad); }
details.violation { border:1px solid #fecaca; border-left:4px solid var(--bad);
  border-radius:6px; margin:8px 0; background:#fff; }
details.violation > summary { cursor:pointer; padding:8px 12px; font-weight:600; }
details.violation > div { padding:0 12px 10px; overflow-x:auto; }
details.more > summary { cursor:pointer; color:var(--muted); padding:4px 0; }
.note { color:var(--muted); }
.timeline-card { margin:6px 0 10px; }
svg.timeline { display:block; max-width:100%; height:auto; background:#fff; }
section.warnings { border-color:#fde68a; background:var(--warn-bg); }
section.warnings p { margin:4px 0; color:#713f12; }
svg.plot { display:block; max-width:100%; height:auto; }
"""


def page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(title)}</title><style>{CSS}</style></head>"
        f"<body><main>{body}</main></body></html>\n"
    )


def compact_json(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return repr(value)


# Fields holding unix seconds; shown relative to the run start.
TIME_FIELDS = frozenset(
    {"time", "invoke_time", "complete_time", "start", "end", "applied_at", "created_at", "at"}
)


def format_cell(key: str, value: Any, start: float | None) -> str:
    """One table cell's inner HTML, escaped."""
    if value is None:
        return "<span class='note'>–</span>"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key in TIME_FIELDS and isinstance(value, (int, float)) and start is not None:
        return relative_time(value, start)
    if isinstance(value, (dict, list)):
        return f"<code>{escape(compact_json(value))}</code>"
    if isinstance(value, (int, float)):
        return escape(str(value))
    return f"<code>{escape(str(value))}</code>"


def records_table(
    records: Sequence[Mapping[str, Any]],
    preferred: Sequence[str],
    *,
    start: float | None = None,
    limit: int = 200,
    hidden: Iterable[str] = (),
) -> str:
    """A table of dicts: preferred columns first, then any other key seen."""
    skip = set(hidden)
    shown = [r if isinstance(r, Mapping) else {"value": r} for r in records[:limit]]
    columns = [key for key in preferred if any(key in r for r in shown)]
    for record in shown:
        for key in record:
            if str(key) not in columns and key not in skip:
                columns.append(str(key))
    rows = []
    for record in shown:
        cells = "".join(f"<td>{format_cell(k, record.get(k), start)}</td>" for k in columns)
        rows.append(f"<tr>{cells}</tr>")
    header = "".join(f"<th>{escape(c)}</th>" for c in columns)
    more = ""
    if len(records) > limit:
        more = f"<p class='note'>{len(records) - limit} more not shown (see result.json).</p>"
    return (f"<div class='scroll'><table><thead><tr>{header}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>{more}")


def key_value_table(pairs: Iterable[tuple[str, Any]], *, numeric: bool = True) -> str:
    rows = "".join(
        f"<tr><th>{escape(str(k))}</th>"
        f"<td class='{'num' if numeric else ''}'>{escape(str(v))}</td></tr>"
        for k, v in pairs
    )
    return f"<table><tbody>{rows}</tbody></table>"


def card_table(head: str, rows: str, *, scroll: bool = False) -> str:
    """A table in a card: `head` is the header row's cells (<th>…), `rows` the body's
    <tr>s; `scroll` lets a wide table scroll sideways instead of widening the page."""
    return (f"<section class='card{' scroll' if scroll else ''}'><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{rows}</tbody></table></section>")


def badge(text: str, kind: str) -> str:
    return f"<span class='badge {escape(kind)}'>{escape(text)}</span>"


def relative_time(moment: Any, start: float | None) -> str:
    if isinstance(moment, bool) or not isinstance(moment, (int, float)):
        return "–"
    if start is None:
        return escape(str(moment))
    return f"+{moment - start:.3f}\u202fs"


def _table(header: Sequence[str], rows: Iterable[str], *, numeric: Iterable[str] = ()) -> str:
    right = set(numeric)
    head = "".join(f"<th class='{'num' if h in right else ''}'>{escape(h)}</th>" for h in header)
    return (f"<div class='scroll'><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _code(value: Any) -> str:
    if value is None or value == "":
        return "<span class='note'>–</span>"
    return f"<code>{escape(str(value))}</code>"


def operations_table(operations: Sequence[Mapping[str, Any]], start: float | None,
                     *, limit: int = 200) -> str:
    """History operations, one compact row each (the full records are in result.json)."""
    rows = []
    for op in operations[:limit]:
        kind = str(op.get("type") or "?")
        outcome = badge(kind, {"ok": "pass", "fail": "fail"}.get(kind, "warn"))
        if op.get("status") is not None:
            outcome += f" <code>{escape(str(op['status']))}</code>"
        if op.get("replayed"):
            outcome += "<span class='tag'>replayed</span>"
        ident = ""
        for key, label in (("idempotency_key", "key"), ("event_id", "event"),
                           ("message_id", "msg")):
            if op.get(key) not in (None, ""):
                ident = f"<span class='note'>{label}</span> {_code(op[key])}"
                break
        invoked, completed = op.get("invoke_time"), op.get("complete_time")
        took = ""
        if isinstance(invoked, (int, float)) and isinstance(completed, (int, float)):
            took = f" <span class='note'>({(completed - invoked) * 1000:.0f}\u202fms)</span>"
        cells = [
            _code(op.get("op_id")), _code(op.get("op")), outcome, _code(op.get("expect")),
            ident or _code(None), _code(op.get("order_id")), _code(op.get("provider_ref")),
            escape(str(op.get("amount_cents", "") or "")),
            f"{relative_time(invoked, start)} → {relative_time(completed, start)}{took}",
        ]
        error = op.get("error")
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells)
                    + f"<td class='wrap'>{_code(error)}</td></tr>")
    more = ""
    if len(operations) > limit:
        more = f"<p class='note'>{len(operations) - limit} more not shown (see result.json).</p>"
    header = ("operation", "op", "outcome", "expect", "id", "order", "provider_ref", "amount",
              "invoked → completed", "error")
    return _table(header, rows) + more


def faults_table(faults: Sequence[Mapping[str, Any]], start: float | None) -> str:
    """Fault windows: what was broken, where, and when relative to the run start."""
    rows = []
    # Crash-point windows count their hits (harness.nemesis); other faults have none.
    with_hits = any("hits" in fault for fault in faults)
    for fault in faults:
        what = [str(fault.get(k)) for k in ("type", "action", "stream") if fault.get(k)]
        for key in ("probability", "count", "delay_ms"):
            if fault.get("kind") == "crash_point" and fault.get(key) is not None:
                what.append(f"{key} {fault[key]}")
        attributes = fault.get("attributes")
        if attributes:
            what.append(compact_json(attributes))
        toxicity = fault.get("toxicity")
        if isinstance(toxicity, (int, float)) and toxicity != 1:
            what.append(f"toxicity {toxicity}")
        begin, end = fault.get("start"), fault.get("end")
        length = ""
        if isinstance(begin, (int, float)) and isinstance(end, (int, float)):
            length = f"{end - begin:.1f}\u202fs"
        cells = [_code(fault.get("name")), escape(str(fault.get("kind") or "")),
                 _code(fault.get("target")), f"<code>{escape(' '.join(what))}</code>",
                 relative_time(begin, start), relative_time(end, start), length]
        if with_hits:
            cells.append(_hits(fault, start))
        error = fault.get("error")
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells)
                    + (f"<td class='wrap'>{badge(str(error), 'fail')}</td>" if error else "<td></td>")
                    + "</tr>")
    header = ("name", "kind", "target", "what", "start", "end", "length", *(("hits",) if with_hits else ()),
              "error")
    return _table(header, rows, numeric=("hits",))


def _hits(fault: Mapping[str, Any], start: float | None) -> str:
    """A crash-point window's hit count, with when each hit landed (the first 20)."""
    hits = fault.get("hits")
    if isinstance(hits, bool) or not isinstance(hits, int):
        return "<span class='note'>–</span>"
    times = fault.get("hit_times")
    listed = ""
    if isinstance(times, list) and times:
        shown = ", ".join(relative_time(t, start) for t in times[:20])
        more = f" (+{len(times) - 20})" if len(times) > 20 else ""
        listed = f"<br><span class='note hit-times'>{shown}{more}</span>"
    return f"<span class='hits' data-hits='{hits}'>{hits}</span>{listed}"


class ViolationView(Protocol):
    """A violation as the report shows it (harness.check.checker.Violation is one)."""

    @property
    def message(self) -> str: ...
    @property
    def details(self) -> Mapping[str, Any]: ...
    @property
    def evidence(self) -> Mapping[str, Any]: ...


class InvariantView(Protocol):
    """An invariant's outcome as the report shows it (InvariantResult is one)."""

    @property
    def name(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def passed(self) -> bool: ...
    @property
    def violation_count(self) -> int: ...
    @property
    def violations(self) -> Sequence[ViolationView]: ...


@dataclass(frozen=True)
class _Violation:
    message: str
    details: Mapping[str, Any]
    evidence: Mapping[str, Any]


@dataclass(frozen=True)
class _Invariant:
    name: str
    title: str
    passed: bool
    violation_count: int
    violations: Sequence[_Violation]


def violations_section(result: Mapping[str, Any], start: float, *, open_first: int = 3) -> str:
    """`invariant_violations` for a result document read from JSON (the probe's)."""
    invariants = []
    for inv in result.get("invariants") or []:
        violations = [_Violation(str(v.get("message") or "violation"), _mapping(v.get("details")),
                                 _mapping(v.get("evidence")))
                      for v in inv.get("violations") or [] if isinstance(v, Mapping)]
        total = inv.get("violation_count", len(violations))
        name = str(inv.get("name", "?"))
        invariants.append(_Invariant(name, str(inv.get("title") or name), bool(inv.get("passed", False)),
                                     total if isinstance(total, int) else len(violations), violations))
    return invariant_violations(invariants, start, open_first=open_first)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def invariant_violations(invariants: Sequence[InvariantView], start: float, *, open_first: int = 3,
                         timeline: Callable[[str, int], str] | None = None) -> str:
    """Each failed invariant's violations with their evidence; the first few unfolded.
    `timeline(invariant, index)` gives the HTML drawn above a violation's evidence
    (its timeline, harness.report.timeline), '' for none."""
    failed = [inv for inv in invariants if not inv.passed]
    if not failed:
        return "<h2>Violations</h2><p class='note'>No violations: every invariant held.</p>"
    parts = ["<h2>Violations</h2>"]
    for inv in failed:
        violations = inv.violations
        total = inv.violation_count
        parts.append(f"<h3 id='inv-{escape(inv.name)}'>{escape(inv.title or inv.name)} "
                     f"<span class='mono note'>{escape(inv.name)}</span> · "
                     f"{escape(plural(total, 'violation'))}</h3>")
        for index, violation in enumerate(violations):
            drawn = timeline(inv.name, index) if timeline is not None else ""
            parts.append(_violation(violation, start, open_=index < open_first, drawn=drawn))
        if total > len(violations):
            parts.append(f"<p class='note'>{total - len(violations)} more not listed "
                         "(the checker keeps the first ones).</p>")
    return "".join(parts)


def _violation(violation: ViolationView, start: float, *, open_: bool, drawn: str = "") -> str:
    evidence = violation.evidence
    sections = [f"<div class='timeline-card'>{drawn}</div>"] if drawn else []
    details = violation.details
    if details:
        pairs = " · ".join(f"<span class='note'>{escape(str(k))}</span> "
                           f"{format_cell(str(k), v, start)}" for k, v in details.items())
        sections.append(f"<p class='details'>{pairs}</p>")
    renderers: dict[str, Callable[[Sequence[Mapping[str, Any]], float | None], str]] = {
        "operations": operations_table,
        "faults": faults_table,
        "payments": lambda rows, start: records_table(
            rows, ("order_id", "provider_ref", "amount_cents", "source", "source_id",
                   "applied_at"), start=start, hidden=("kind",)),
    }
    for key, value in evidence.items():
        title = f"<h4 style='margin:10px 0 4px'>{escape(str(key))}</h4>"
        if isinstance(value, list) and value:
            rows = [v if isinstance(v, Mapping) else {"value": v} for v in value]
            render = renderers.get(str(key))
            table = render(rows, start) if render else records_table(rows, (), start=start)
            if len(value) > 8:
                table = (f"<details class='more'><summary>{len(value)} {escape(str(key))}"
                         f"</summary>{table}</details>")
            sections.append(title + table)
        elif isinstance(value, list):
            sections.append(title + "<p class='note'>none</p>")
        else:
            sections.append(title + format_cell(str(key), value, start))
    return (f"<details class='violation'{' open' if open_ else ''}>"
            f"<summary>{escape(violation.message or 'violation')}</summary>"
            f"<div>{''.join(sections)}</div></details>")


def plural(count: Any, noun: str) -> str:
    """`1 fault`, `2 faults`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"
