"""A timeline per violation: who did what to its subject, when, under which faults.

Jepsen's timeline.html is the model: one lane per client process, each operation a
bar from its invoke to its completion, coloured by what the client was told (`ok`
green, `fail` red, `info` yellow). Here a violation's subject (its order, its
idempotency key, its message) gets one small inline SVG: one lane per Locust user
(a user's processes after an `info` stay on its lane; a consumer's operations, when
the history shows any, get a lane per consumer), the effects the app exported
(payments applied, message effects) as marks on lanes of their own, the fault
windows that overlap the operations shaded behind them, and each crash-point hit
(`hit_times` of a `crash_point` fault) as a red tick.

What is drawn is bounded, so a report of 10^5 operations stays small and fast:
`TimelineCollector` takes the operations of at most `MAX_TIMELINES` subjects in the
report's one pass over the history (three dictionary lookups per operation), keeps
the checker's evidence operations and, of the others about the subject, the
`MAX_OPERATIONS` nearest in time to that evidence; at most `MAX_LANES` lanes are
drawn. Everything from the run is escaped.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

MAX_TIMELINES = 20
MAX_OPERATIONS = 60  # per timeline, the checker's evidence operations included
MAX_LANES = 16
MAX_MARKS = 40  # payments, effects and crash-point hits drawn per timeline

WIDTH = 960
LABEL_WIDTH = 160
LANE_HEIGHT = 20
BAR_HEIGHT = 12
LABEL_ROWS = 4  # fault labels stacked above the lanes, one row each
BOTTOM = 30
OUTCOME_COLORS = {"ok": "#16a34a", "fail": "#dc2626", "info": "#eab308"}
FAULT_FILL = "#64748b"
HIT_COLOR = "#b91c1c"
MARK_COLOR = "#1e293b"
TEXT_COLOR = "#334155"
FONT = "font-family='system-ui, -apple-system, Segoe UI, Roboto, sans-serif'"

# `w0-u4-p1` is user 4 of load process w0 in its second incarnation (after an info).
_INCARNATION = re.compile(r"-p\d+$")


@dataclass(frozen=True)
class Subject:
    """What a violation is about: the orders, keys and messages its operations name."""

    label: str
    order_ids: frozenset[str] = frozenset()
    keys: frozenset[str] = frozenset()
    message_ids: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return not (self.order_ids or self.keys or self.message_ids)


def _strings(*values: Any) -> frozenset[str]:
    found: set[str] = set()
    for value in values:
        if isinstance(value, str) and value:
            found.add(value)
        elif isinstance(value, (list, tuple)):
            found.update(item for item in value if isinstance(item, str) and item)
    return frozenset(found)


def subject_of(order_id: str | None, details: Mapping[str, Any]) -> Subject:
    """A violation's subject from its order and its `details` (docs/checker.md): the
    key, the message, the orders it names. A key names the subject before an order,
    because every operation under the key matters, including the creates."""
    orders = _strings(order_id, details.get("order_id"), details.get("order_ids"))
    keys = _strings(details.get("idempotency_key"), details.get("idempotency_keys"))
    messages = _strings(details.get("message_id"))
    if messages:
        label = "message " + ", ".join(sorted(messages))
    elif keys:
        label = "key " + ", ".join(sorted(keys))
    elif orders:
        label = "order " + ", ".join(sorted(orders))
    else:
        label = "its evidence"
    return Subject(label, orders, keys, messages)


@dataclass
class _Picked:
    """One subject's operations: its evidence, then a bounded heap of the others."""

    subject: Subject
    evidence: dict[str, dict[str, Any]]
    center: float | None
    heap: list[tuple[float, int, dict[str, Any]]] = field(default_factory=list)


class TimelineCollector:
    """The operations of up to MAX_TIMELINES subjects, gathered in one pass.

    `add(subject, evidence_ops)` registers a subject (None and empty subjects keep
    only their evidence); `offer(op)` is called for each merged operation of the
    history; `operations(index)` gives a subject's operations in invoke order."""

    def __init__(self, limit: int = MAX_OPERATIONS) -> None:
        self.limit = limit
        self._picked: list[_Picked] = []
        self._by_order: dict[str, list[int]] = {}
        self._by_key: dict[str, list[int]] = {}
        self._by_message: dict[str, list[int]] = {}
        self._sequence = 0

    def add(self, subject: Subject, evidence_ops: Iterable[Mapping[str, Any]]) -> int:
        evidence: dict[str, dict[str, Any]] = {}
        for op in evidence_ops:
            if isinstance(op, Mapping):
                evidence[str(op.get("op_id") or f"evidence-{len(evidence)}")] = dict(op)
        times = sorted(t for op in evidence.values() if (t := _time(op.get("invoke_time"))) is not None)
        center = times[len(times) // 2] if times else None
        index = len(self._picked)
        self._picked.append(_Picked(subject, evidence, center))
        for key, index_of in ((subject.order_ids, self._by_order), (subject.keys, self._by_key),
                              (subject.message_ids, self._by_message)):
            for value in key:
                index_of.setdefault(value, []).append(index)
        return index

    def wants_history(self) -> bool:
        return bool(self._by_order or self._by_key or self._by_message)

    def offer(self, op: Mapping[str, Any]) -> None:
        get = op.get
        hits: list[int] = []
        order_id = get("order_id")
        if order_id is not None:
            hits += self._by_order.get(order_id, ())
        key = get("idempotency_key")
        if key is not None:
            hits += self._by_key.get(key, ())
        message_id = get("message_id")
        if message_id is not None:
            hits += self._by_message.get(message_id, ())
        if not hits:
            return
        op_id = str(get("op_id"))
        invoked = _time(get("invoke_time"))
        for index in set(hits):
            picked = self._picked[index]
            if op_id in picked.evidence:
                continue
            room = self.limit - len(picked.evidence)
            if room <= 0:
                continue
            # Nearest to the evidence first (earliest when there is none): a max-heap
            # on distance, so the farthest drops out.
            distance = abs((invoked or 0.0) - picked.center) if picked.center is not None else (invoked or 0.0)
            self._sequence += 1
            entry = (-distance, -self._sequence, dict(op))
            if len(picked.heap) < room:
                heapq.heappush(picked.heap, entry)
            elif entry[:2] > picked.heap[0][:2]:
                heapq.heapreplace(picked.heap, entry)

    def subject(self, index: int) -> Subject:
        return self._picked[index].subject

    def operations(self, index: int) -> list[dict[str, Any]]:
        picked = self._picked[index]
        ops = [*picked.evidence.values(), *(entry[2] for entry in picked.heap)]
        ops.sort(key=lambda op: (_time(op.get("invoke_time")) or 0.0, str(op.get("op_id"))))
        return ops

    def evidence_ids(self, index: int) -> frozenset[str]:
        return frozenset(self._picked[index].evidence)

    def __len__(self) -> int:
        return len(self._picked)


def _time(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def lane_of(op: Mapping[str, Any]) -> str:
    """The lane of an operation: its Locust user (`w0-u4`), or its consumer."""
    process = op.get("process")
    if not isinstance(process, str) or not process:
        return "unknown process"
    if process.startswith("consumer"):
        return process
    return _INCARNATION.sub("", process)


@dataclass(frozen=True)
class _Mark:
    lane: str
    at: float
    kind: str  # payment | effect | hit
    label: str


def _marks(payments: Sequence[Mapping[str, Any]], effects: Sequence[Mapping[str, Any]]) -> list[_Mark]:
    marks = []
    for payment in payments:
        at = _time(payment.get("applied_at"))
        if at is not None:
            source = str(payment.get("source") or "?")
            marks.append(_Mark(f"{source} payment", at, "payment",
                               f"payment {payment.get('provider_ref')} applied by {source} "
                               f"({payment.get('source_id')})"))
    for effect in effects:
        at = _time(effect.get("at"))
        if at is not None:
            marks.append(_Mark("message effects", at, "effect",
                               f"message {effect.get('message_id')}: {effect.get('outcome')}"))
    return marks


def _fault_label(fault: Mapping[str, Any]) -> str:
    name = str(fault.get("name") or fault.get("kind") or "fault")
    target = fault.get("target")
    return f"{name} @ {target}" if target else name


def _hit_times(fault: Mapping[str, Any]) -> list[float]:
    times = fault.get("hit_times")
    if not isinstance(times, list):
        return []
    return [t for value in times if (t := _time(value)) is not None]


def render_timeline(subject: Subject, operations: Sequence[Mapping[str, Any]],
                    faults: Sequence[Mapping[str, Any]], start: float, *,
                    payments: Sequence[Mapping[str, Any]] = (), effects: Sequence[Mapping[str, Any]] = (),
                    evidence_ids: frozenset[str] = frozenset()) -> str:
    """One violation's timeline as an inline `<svg data-timeline>`; '' when there is
    nothing with a time to draw. Times are labelled relative to the run's `start`."""
    ops = [op for op in operations if _time(op.get("invoke_time")) is not None]
    marks = _marks(payments, effects)
    moments = [t for op in ops for t in (_time(op.get("invoke_time")), _time(op.get("complete_time")))
               if t is not None] + [mark.at for mark in marks]
    if not moments:
        return ""
    t0, t1 = min(moments), max(moments)
    pad = max((t1 - t0) * 0.04, 0.02)
    t0, t1 = t0 - pad, t1 + pad
    overlapping = []
    for fault in faults:
        begin = _time(fault.get("start"))
        end = _time(fault.get("end"))
        if begin is None or begin > t1 or (end is not None and end < t0):
            continue
        overlapping.append((fault, begin, end if end is not None else t1))
    for fault, _, _ in overlapping:
        for at in _hit_times(fault):
            if t0 <= at <= t1:
                marks.append(_Mark("crash-point hits", at, "hit",
                                   f"crash point {fault.get('crash_point') or fault.get('target')} hit "
                                   f"({fault.get('action') or 'armed'})"))
    marks = sorted(marks, key=lambda mark: mark.at)[:MAX_MARKS]

    lanes: list[str] = []
    for op in ops:
        lane = lane_of(op)
        if lane not in lanes:
            lanes.append(lane)
    hidden = max(len(lanes) - MAX_LANES, 0)
    lanes = lanes[:MAX_LANES]
    mark_lanes: list[str] = []
    for mark in marks:
        if mark.lane not in mark_lanes:
            mark_lanes.append(mark.lane)
    rows = {name: i for i, name in enumerate([*lanes, *mark_lanes])}
    top = 16 + 13 * min(len(overlapping), LABEL_ROWS)
    left, right = LABEL_WIDTH, WIDTH - 16
    span = t1 - t0

    def sx(moment: float) -> float:
        return left + (right - left) * (min(max(moment, t0), t1) - t0) / span

    def lane_y(name: str) -> int:
        return top + rows[name] * LANE_HEIGHT

    height = top + max(len(rows), 1) * LANE_HEIGHT + BOTTOM
    title = f"Timeline of {subject.label}: {len(ops)} operation(s), {len(overlapping)} fault window(s)"
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' class='timeline' data-timeline='{escape(subject.label)}' "
        f"data-operations='{len(ops)}' viewBox='0 0 {WIDTH} {height}' width='100%' role='img' {FONT} "
        f"font-size='11'><title>{escape(title)}</title>",
    ]
    for index, (fault, begin, end) in enumerate(overlapping):
        x0, x1 = sx(begin), sx(end)
        label = _fault_label(fault)
        hits = fault.get("hits")
        hit_text = f", {hits} hit(s)" if isinstance(hits, int) and not isinstance(hits, bool) else ""
        parts.append(
            f"<rect class='fault-window' data-fault='{escape(label)}' x='{x0:.1f}' y='{top - 4}' "
            f"width='{max(x1 - x0, 2.0):.1f}' height='{height - top - BOTTOM + 8}' fill='{FAULT_FILL}' "
            f"fill-opacity='0.14' stroke='{FAULT_FILL}' stroke-opacity='0.45'>"
            f"<title>{escape(label)}: {_rel(begin, start)} → {_rel(end, start)}{escape(hit_text)}</title></rect>"
            f"<text x='{x0 + 3:.1f}' y='{14 + 13 * (index % LABEL_ROWS)}' fill='{TEXT_COLOR}'>"
            f"{escape(label + hit_text)}</text>")
    for name, row in rows.items():
        y = top + row * LANE_HEIGHT
        kind = "marks" if name in mark_lanes else "process"
        parts.append(
            f"<g class='lane' data-lane='{escape(name)}' data-kind='{kind}'>"
            f"<line x1='{left}' y1='{y + LANE_HEIGHT / 2:.1f}' x2='{right}' y2='{y + LANE_HEIGHT / 2:.1f}' "
            f"stroke='#e2e8f0'/><text x='{left - 6}' y='{y + LANE_HEIGHT / 2 + 4:.1f}' text-anchor='end' "
            f"fill='{TEXT_COLOR}' class='mono'>{escape(name)}</text></g>")
    for op in ops:
        lane = lane_of(op)
        if lane not in rows:
            continue
        invoked = _time(op.get("invoke_time")) or t0
        completed = _time(op.get("complete_time"))
        outcome = str(op.get("type") or "info")
        color = OUTCOME_COLORS.get(outcome, OUTCOME_COLORS["info"])
        x0 = sx(invoked)
        x1 = sx(completed if completed is not None else invoked)
        bar_y = lane_y(lane) + (LANE_HEIGHT - BAR_HEIGHT) / 2
        op_id = str(op.get("op_id") or "")
        chosen = op_id in evidence_ids
        # The checker's evidence is outlined; the rest keep a hairline so neighbours stay apart.
        stroke = " stroke='#0f172a' stroke-width='1.5'" if chosen else " stroke='#ffffff' stroke-width='0.6'"
        parts.append(
            f"<rect class='op {escape(outcome)}' data-op='{escape(str(op.get('op') or '?'))}' "
            f"data-outcome='{escape(outcome)}' data-op-id='{escape(op_id)}' x='{x0:.1f}' y='{bar_y:.1f}' "
            f"width='{max(x1 - x0, 2.0):.1f}' height='{BAR_HEIGHT}' rx='2' fill='{color}'{stroke}>"
            f"<title>{escape(_describe(op, start))}</title></rect>")
    for mark in marks:
        x = sx(mark.at)
        y = lane_y(mark.lane)
        color = HIT_COLOR if mark.kind == "hit" else MARK_COLOR
        parts.append(
            f"<path class='mark {mark.kind}' d='M{x:.1f} {y + 3} l5 7 l-5 7 l-5 -7 z' fill='{color}'>"
            f"<title>{escape(mark.label)} at {_rel(mark.at, start)}</title></path>")
        if mark.kind == "hit":
            parts.append(f"<line class='crash-hit' x1='{x:.1f}' y1='{top - 4}' x2='{x:.1f}' "
                         f"y2='{height - BOTTOM + 4}' stroke='{HIT_COLOR}' stroke-width='1' "
                         "stroke-dasharray='3 2'/>")
    axis_y = height - BOTTOM + 16
    for tick in _ticks(t0, t1):
        parts.append(f"<text x='{sx(tick):.1f}' y='{axis_y}' text-anchor='middle' fill='{TEXT_COLOR}'>"
                     f"{escape(_rel(tick, start))}</text>")
    if hidden:
        parts.append(f"<text x='{right}' y='{axis_y}' text-anchor='end' fill='{TEXT_COLOR}'>"
                     f"{hidden} more lane(s) not drawn</text>")
    parts.append("</svg>")
    return "".join(parts)


def _ticks(t0: float, t1: float, count: int = 6) -> list[float]:
    raw = (t1 - t0) / count
    exponent = math.floor(math.log10(raw))
    step = next(m * 10.0 ** exponent for m in (1, 2, 5, 10) if m * 10.0 ** exponent >= raw)
    first = math.ceil(t0 / step) * step
    return [first + i * step for i in range(count + 2) if first + i * step <= t1]


def _rel(moment: float, start: float) -> str:
    return f"+{moment - start:.3f} s"


def _describe(op: Mapping[str, Any], start: float) -> str:
    """The bar's tooltip: what was asked, what came back, when."""
    parts = [str(op.get("op") or "?"), str(op.get("type") or "info")]
    if op.get("status") is not None:
        parts.append(str(op["status"]))
    if op.get("replayed"):
        parts.append("replayed")
    for key in ("expect", "idempotency_key", "order_id", "provider_ref", "message_id", "event_id"):
        if op.get(key) not in (None, ""):
            parts.append(f"{key}={op[key]}")
    invoked, completed = _time(op.get("invoke_time")), _time(op.get("complete_time"))
    if invoked is not None:
        when = _rel(invoked, start)
        if completed is not None:
            when += f" → {_rel(completed, start)} ({(completed - invoked) * 1000:.0f} ms)"
        parts.append(when)
    if op.get("process"):
        parts.append(f"process {op['process']}")
    if op.get("error"):
        parts.append(f"error: {op['error']}")
    return " · ".join(parts)
