"""report.html of a probe run: verdict, the advice (what a service may improve but did
not break), conformance table, invariants, what the load did, the fault windows and
every violation with its evidence.

Built from result.json's document alone (so a saved run can be re-rendered), with
the shared HTML helpers of harness.report.html; every string is escaped there or
here, because answers come from a service the harness does not trust.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from harness.report.html import badge, card_table, faults_table, key_value_table, page, violations_section

SEED_NOTE = ("the users' choices (kinds of duplicates, bodies, keys, backoff) and, with the plan's own seed, "
             "the fault schedule; not how requests interleave nor where a kill lands in a request, so under "
             "process faults one seed can FAIL once and PASS the next: a PASS there means 'not found'")
STATUS_BADGE = {"pass": "pass", "fail": "fail", "not observed": "warn", "not checkable": "muted"}


def render_report(document: Mapping[str, Any]) -> str:
    verdict = str(document.get("verdict") or "fail")
    start = float(document.get("started") or 0.0)
    counts = document.get("counts") or {}
    parts = [
        f"<h1>Idempotency probe · {escape(str(document.get('upstream')))} · {escape(str(document.get('run_id')))}</h1>",
        _verdict(document, verdict, counts),
        *(("<h2>Advice</h2>", _advice(document["advice"])) if document.get("advice") else ()),
        "<h2>Conformance</h2>",
        f"<p class='note'>Each requirement of the IETF draft <i>The Idempotency-Key HTTP Header Field</i> "
        f"({escape(str(document.get('draft')))}), paraphrased, as a client can check it; "
        "rows marked <i>practice</i> are common practice, not the draft.</p>",
        _conformance(document.get("conformance") or []),
        "<h2>Invariants</h2>",
        _invariants(document.get("invariants") or []),
        *(("<h2>The provider's ledger</h2>", _ledger(document["ledger"])) if "ledger" in document else ()),
        *(("<h2>Crash coverage</h2>", _coverage(document["explore"])) if "explore" in document else ()),
        "<h2>What the clients did</h2>",
        _kinds(counts),
        "<h2>Faults</h2>",
        faults_table(document.get("faults") or [], start) if document.get("faults")
        else "<p class='note'>No fault plan: concurrency alone.</p>",
        violations_section(document, start),
        "<h2>Run</h2>",
        key_value_table([
            ("upstream", document.get("upstream")), ("toxiproxy", document.get("toxiproxy")),
            ("profile", document.get("profile")), ("plan", document.get("plan") or "none"),
            ("endpoints", ", ".join(f"{e['method']} {e['path']}" for e in document.get("endpoints") or [])),
            ("identities", document.get("identities") or "one"),
            ("effect queries", counts.get("effect_queries", "none (no effects:)")),
            *((f"load.{k}", v) for k, v in (document.get("load") or {}).items()),
            ("what the seed fixes", SEED_NOTE),
            ("strict", "yes: SHOULD rows fail the run" if document.get("strict") else "no: SHOULD rows are advice"),
        ], numeric=False),
    ]
    return page(f"probe {verdict}: {document.get('upstream')}", "".join(parts))


def _coverage(explore: Mapping[str, Any]) -> str:
    """The explorer's table (harness.nemesis.explorer): each step, its crashes by
    action, and the invariants that failed after a crash there."""
    actions = list(explore.get("actions") or [])
    rows = []
    for row in explore.get("coverage") or []:
        crashed = row.get("crashed") or {}
        failed = row.get("failed") or {}
        note = "start-up (not crashed)" if row.get("startup") else ("" if row.get("learned") else "seen after learning")
        counts = "".join(f"<td class='num'>{crashed.get(action, 0)}</td>" for action in actions)
        failures = ", ".join(badge(f"{name} ×{count}", "fail") for name, count in failed.items()) or "none"
        rows.append(f"<tr><td><code>{escape(str(row.get('step')))}</code></td>{counts}"
                    f"<td class='num'>{row.get('attempts', 0)}</td><td>{failures}</td><td>{escape(note)}</td></tr>")
    head = "".join(f"<th>{escape(h)}</th>" for h in ("step", *(f"crashed {a}" for a in actions), "armed",
                                                      "failed after a crash here", "note"))
    reasons = explore.get("reasons") or []
    note = (f"<p class='note'>Seed {escape(str(explore.get('seed')))}; a violation is put on a crash when a key in "
            "its evidence had a request in flight when the crash fired (docs/probe.md, Crash at every step).</p>")
    missing = "".join(f"<p>{badge('not crashed', 'warn')} {escape(str(reason))}</p>" for reason in reasons)
    return note + card_table(head, "".join(rows), scroll=True) + missing


def write_report(path: Path, document: Mapping[str, Any]) -> None:
    partial = Path(path).with_name(Path(path).name + ".partial")
    partial.write_text(render_report(document), encoding="utf-8")
    partial.replace(path)


def _verdict(document: Mapping[str, Any], verdict: str, counts: Mapping[str, Any]) -> str:
    failed = [inv["name"] for inv in document.get("invariants") or [] if not inv.get("passed")]
    if verdict == "pass":
        advice = len(document.get("advice") or [])
        headline = "every invariant held" + (f"; {advice} advice (not failures, see below)" if advice else "")
    elif verdict == "fail":
        headline = "violated: " + ", ".join(failed)
    else:
        headline = "; ".join(str(r) for r in document.get("inconclusive_reasons") or [])
    stats = "".join(f"<div><dt>{escape(label)}</dt><dd>{escape(str(value))}</dd></div>" for label, value in (
        ("requests", counts.get("operations", 0)), ("acknowledged", counts.get("acknowledged", 0)),
        ("keys", counts.get("keys", 0)), ("keys duplicated", counts.get("duplicated_keys", 0)),
        ("final reads", counts.get("final_reads", 0)), ("faults", len(document.get("faults") or []))))
    return (f"<section class='verdict {escape(verdict)}'><span class='word'>{escape(verdict.upper())}</span>"
            f"<span class='headline'>{escape(headline)}</span><dl>{stats}</dl></section>")


def _advice(advice: list[Mapping[str, Any]]) -> str:
    body = "".join(
        f"<tr><td><code>{escape(str(item.get('rule')))}</code></td><td>{escape(str(item.get('level')))}</td>"
        f"<td class='wrap'>{escape(str(item.get('message')))}</td></tr>" for item in advice)
    return ("<p class='note'>What the service may improve but did not break: not failures "
            "(<code>--strict</code> or <code>strict: true</code> makes the SHOULD rows fail the run).</p>"
            + card_table("<th>rule</th><th>level</th><th>what was seen</th>", body))


def _conformance(rows: list[Mapping[str, Any]]) -> str:
    body = "".join(
        f"<tr><td>{escape(str(row['section']))}</td><td>{escape(str(row['level']))}</td>"
        f"<td class='wrap'>{escape(str(row['requirement']))}</td>"
        f"<td>{badge(str(row['status']), STATUS_BADGE.get(str(row['status']), 'muted'))}</td>"
        f"<td class='wrap'>{escape(str(row['evidence']))}</td></tr>" for row in rows)
    return card_table("<th>section</th><th>level</th><th>requirement</th><th>result</th><th>evidence</th>",
                      body, scroll=True)


def _invariants(invariants: list[Mapping[str, Any]]) -> str:
    body = "".join(
        f"<tr class='{'' if inv.get('passed') else 'failed'}'><td><code>{escape(str(inv['name']))}</code></td>"
        f"<td class='wrap'>{escape(str(inv.get('description', '')))}</td>"
        f"<td class='num'>{escape(str(inv.get('checked', 0)))}</td>"
        f"<td>{badge('held', 'pass') if inv.get('passed') else badge(str(inv.get('violation_count')) + ' violated', 'fail')}"
        "</td></tr>" for inv in invariants)
    return card_table("<th>invariant</th><th>what it proves</th><th class='num'>checked</th><th>result</th>", body)


def _kinds(counts: Mapping[str, Any]) -> str:
    statuses = counts.get("statuses") or {}
    body = "".join(
        f"<tr><td><code>{escape(str(kind))}</code></td><td class='num'>{escape(str(sum(seen.values())))}</td>"
        f"<td>{escape(', '.join(f'{status}×{n}' for status, n in sorted(seen.items())))}</td></tr>"
        for kind, seen in sorted(statuses.items()))
    return ("<section class='card'><table><thead><tr><th>request kind</th><th class='num'>requests</th>"
            f"<th>answers (status × count; None = no answer)</th></tr></thead><tbody>{body}</tbody></table>"
            f"<p class='note'>completions: {escape(str(counts.get('completions') or {}))}</p></section>")


def _ledger(rows: list[Mapping[str, Any]]) -> str:
    """Per business key: the provider's charges next to the service's answers (`provider:`)."""
    if not rows:
        return "<p class='note'>The provider's ledger holds no charge with a business key.</p>"

    def charges(row: Mapping[str, Any]) -> str:
        return "<br>".join(
            f"<code>{escape(str(c['id']))}</code> {escape(str(c['amount']))} {escape(str(c['currency']))} "
            f"{badge(str(c['state']), 'pass' if c.get('moved_money') else 'muted')} "
            f"key <code>{escape(str(c.get('idempotency_key')))}</code>" for c in row.get("charges") or [])

    body = "".join(
        f"<tr class='{'failed' if row.get('violated') else ''}'><td><code>{escape(str(row['key']))}</code></td>"
        f"<td class='num'>{sum(1 for c in row.get('charges') or [] if c.get('moved_money'))}</td>"
        f"<td class='wrap'>{charges(row)}</td>"
        f"<td class='wrap'>{escape(', '.join(str(a) for a in row.get('answers') or []))}</td>"
        f"<td>{escape(', '.join(str(v) for v in row.get('violated') or [])) or badge('held', 'pass')}</td></tr>"
        for row in rows)
    return card_table("<th>business key</th><th class='num'>money moved</th><th>charges (ledger)</th>"
                      "<th>the service's answers (kind status)</th><th>invariants</th>", body, scroll=True)
