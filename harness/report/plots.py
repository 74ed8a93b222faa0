"""Charts as inline SVG strings: the report must open offline from file://.

Three shapes cover the report: a line chart over run time with fault windows
shaded behind the lines, a stacked vertical bar chart and a horizontal bar chart.
Every chart is one `<svg>` element carrying `data-plot` and a `<title>`, so tests
and readers can find it. Every piece of text goes through `html.escape`, because
labels (fault names, targets) come from run files.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape

WIDTH = 960
AXIS_COLOR = "#94a3b8"
GRID_COLOR = "#e2e8f0"
TEXT_COLOR = "#334155"
FAULT_FILL = "#64748b"
FONT = "font-family='system-ui, -apple-system, Segoe UI, Roboto, sans-serif'"


@dataclass(frozen=True)
class FaultWindow:
    """A fault's active interval in seconds since the run start."""

    start: float
    end: float
    label: str
    detail: str = ""


@dataclass(frozen=True)
class Series:
    """One line: points in (seconds, value); a value of None breaks the line."""

    name: str
    color: str
    points: Sequence[tuple[float, float | None]]


@dataclass(frozen=True)
class Segment:
    name: str
    color: str


def nice_step(raw: float) -> float:
    """The smallest 1/2/5 × 10^k at or above `raw`, so ticks land on round numbers."""
    if raw <= 0:
        return 1.0
    exponent = math.floor(math.log10(raw))
    return float(next(m * 10**exponent for m in (1, 2, 5, 10)
                      if m * 10**exponent >= raw * 0.999999))


def format_number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2g}"


def _ticks(maximum: float, count: int = 5) -> list[float]:
    """Round ticks from zero past `maximum`, about `count` intervals of 1/2/5 × 10^k."""
    if maximum <= 0:
        return [0.0, 1.0]
    step = nice_step(maximum / count)
    intervals = max(1, math.ceil(maximum / step - 1e-9))
    return [step * i for i in range(intervals + 1)]


def _time_ticks(duration: float) -> list[float]:
    step = nice_step(max(duration, 1.0) / 8)
    ticks: list[float] = []
    value = 0.0
    while value <= duration + 1e-9 and len(ticks) < 50:
        ticks.append(value)
        value += step
    return ticks


def _open_svg(plot_id: str, title: str, height: int) -> list[str]:
    return [
        f"<svg xmlns='http://www.w3.org/2000/svg' class='plot' data-plot='{escape(plot_id)}' "
        f"viewBox='0 0 {WIDTH} {height}' width='100%' role='img' {FONT} font-size='12'>",
        f"<title>{escape(title)}</title>",
        f"<text x='16' y='22' font-size='15' font-weight='600' fill='{TEXT_COLOR}'>"
        f"{escape(title)}</text>",
    ]


def _legend_width(entries: Sequence[tuple[str, str]]) -> float:
    return sum(7.2 * len(name) + 34 for name, _ in entries)


def _legend_drop(title: str, entries: Sequence[tuple[str, str]]) -> int:
    """Extra height needed when the legend does not fit beside the title."""
    title_width = 16 + 9.2 * len(title) + 24  # 15 px semibold: about 9 px a character
    return 0 if title_width + _legend_width(entries) <= WIDTH - 16 else 22


def _y_grid(ticks: Sequence[float], sy: Callable[[float], float], left: float,
            right: float) -> list[str]:
    """Horizontal grid lines with their value labels on the left axis."""
    lines = []
    for tick in ticks:
        y = sy(tick)
        lines.append(
            f"<line x1='{left}' y1='{y:.1f}' x2='{right}' y2='{y:.1f}' stroke='{GRID_COLOR}'/>"
            f"<text x='{left - 6}' y='{y + 4:.1f}' text-anchor='end' fill='{TEXT_COLOR}'>"
            f"{format_number(tick)}</text>"
        )
    return lines


def _legend(entries: Sequence[tuple[str, str]], y: int) -> list[str]:
    """Legend chips right-aligned on the title row (widths estimated from text length)."""
    parts: list[str] = []
    x: float = WIDTH - 16
    for name, color in reversed(entries):
        text_width = 7.2 * len(name)
        x -= text_width + 34
        parts.append(
            f"<rect x='{x:.1f}' y='{y - 9}' width='12' height='12' rx='2' fill='{color}'/>"
            f"<text x='{x + 17:.1f}' y='{y + 1}' fill='{TEXT_COLOR}'>{escape(name)}</text>"
        )
    return parts


def _label_lanes(
    windows: Sequence[FaultWindow], scale_x: Callable[[float], float], max_lanes: int = 4
) -> list[int]:
    """Pick a text row for each window label so neighbouring labels do not overlap."""
    lane_ends: list[float] = []
    lanes: list[int] = []
    for window in windows:
        left = scale_x(window.start)
        width = 6.5 * len(window.label) + 8
        for lane, end in enumerate(lane_ends):
            if end < left:
                lane_ends[lane] = left + width
                lanes.append(lane)
                break
        else:
            if len(lane_ends) < max_lanes:
                lane_ends.append(left + width)
                lanes.append(len(lane_ends) - 1)
            else:
                lanes.append(len(lanes) % max_lanes)
    return lanes


def line_chart(
    plot_id: str,
    title: str,
    series: Sequence[Series],
    *,
    duration: float,
    windows: Sequence[FaultWindow] = (),
    y_label: str = "",
    empty_note: str = "no operations recorded",
) -> str:
    """Lines over run time (seconds), fault windows shaded and labelled behind them."""
    left, right = 64, WIDTH - 20
    span = max(duration, 1.0)

    def sx(seconds: float) -> float:
        return left + (right - left) * min(max(seconds, 0.0), span) / span

    ordered = sorted(windows, key=lambda w: (w.start, w.end))
    lanes = _label_lanes(ordered, sx)
    drop = _legend_drop(title, [(s.name, s.color) for s in series])
    top = 44 + drop + 15 * ((max(lanes) + 1) if lanes else 0)
    plot_height = 190
    height = top + plot_height + 46

    values = [v for s in series for _, v in s.points if v is not None]
    y_ticks = _ticks(max(values) if values else 0.0)
    y_top = y_ticks[-1]

    def sy(value: float) -> float:
        return top + plot_height - plot_height * value / y_top

    parts = _open_svg(plot_id, title, height)
    parts += _legend([(s.name, s.color) for s in series], 22 + drop)
    for window, lane in zip(ordered, lanes, strict=True):
        x0, x1 = sx(window.start), sx(window.end)
        width = max(x1 - x0, 2.0)
        tooltip = f"{window.label}: {window.start:.1f}–{window.end:.1f} s {window.detail}".strip()
        parts.append(
            f"<rect class='fault-window' data-fault='{escape(window.label)}' x='{x0:.1f}' "
            f"y='{top}' width='{width:.1f}' height='{plot_height}' fill='{FAULT_FILL}' "
            f"fill-opacity='0.16' stroke='{FAULT_FILL}' stroke-opacity='0.5' "
            f"stroke-dasharray='3 3'><title>{escape(tooltip)}</title></rect>"
        )
        label_y = 40 + drop + 15 * lane
        parts.append(
            f"<line x1='{x0:.1f}' y1='{label_y + 3}' x2='{x0:.1f}' y2='{top}' "
            f"stroke='{FAULT_FILL}' stroke-opacity='0.6'/>"
            f"<text class='fault-label' x='{x0 + 3:.1f}' y='{label_y}' font-size='11' "
            f"fill='#475569'>{escape(window.label)}</text>"
        )
    parts += _y_grid(y_ticks, sy, left, right)
    for tick in _time_ticks(span):
        x = sx(tick)
        parts.append(
            f"<line x1='{x:.1f}' y1='{top + plot_height}' x2='{x:.1f}' "
            f"y2='{top + plot_height + 4}' stroke='{AXIS_COLOR}'/>"
            f"<text x='{x:.1f}' y='{top + plot_height + 17}' text-anchor='middle' "
            f"fill='{TEXT_COLOR}'>{format_number(tick)}</text>"
        )
    parts.append(
        f"<line x1='{left}' y1='{top + plot_height}' x2='{right}' y2='{top + plot_height}' "
        f"stroke='{AXIS_COLOR}'/>"
        f"<text x='{(left + right) / 2:.0f}' y='{height - 8}' text-anchor='middle' "
        f"fill='{TEXT_COLOR}'>seconds since run start</text>"
    )
    if y_label:
        parts.append(
            f"<text transform='translate(16 {top + plot_height / 2:.0f}) rotate(-90)' "
            f"text-anchor='middle' fill='{TEXT_COLOR}'>{escape(y_label)}</text>"
        )
    for line in series:
        for run in _unbroken_runs(line.points):
            coords = " ".join(f"{sx(x):.1f},{sy(v):.1f}" for x, v in run)
            parts.append(
                f"<polyline class='series' data-series='{escape(line.name)}' points='{coords}' "
                f"fill='none' stroke='{line.color}' stroke-width='1.8' "
                f"stroke-linejoin='round'/>"
            )
    if not values:
        parts.append(
            f"<text x='{(left + right) / 2:.0f}' y='{top + plot_height / 2:.0f}' "
            f"text-anchor='middle' fill='{AXIS_COLOR}' font-size='14'>{escape(empty_note)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _unbroken_runs(
    points: Sequence[tuple[float, float | None]],
) -> list[list[tuple[float, float]]]:
    runs: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    for x, value in points:
        if value is None:
            if current:
                runs.append(current)
            current = []
        else:
            current.append((x, value))
    if current:
        runs.append(current)
    return runs


def stacked_bar_chart(
    plot_id: str,
    title: str,
    bars: Mapping[str, Mapping[str, float]],
    segments: Sequence[Segment],
    *,
    empty_note: str = "nothing to show",
) -> str:
    """One vertical bar per category, stacked by segment, with totals on top."""
    entries = [(s.name, s.color) for s in segments]
    drop = _legend_drop(title, entries)
    height = 300 + drop
    top, bottom, left, right = 56 + drop, 250 + drop, 64, WIDTH - 20
    totals = {name: sum(values.get(s.name, 0) for s in segments) for name, values in bars.items()}
    y_ticks = _ticks(max(totals.values(), default=0.0))
    y_top = y_ticks[-1]

    def sy(value: float) -> float:
        return bottom - (bottom - top) * value / y_top

    parts = _open_svg(plot_id, title, height)
    parts += _legend(entries, 22 + drop)
    parts += _y_grid(y_ticks, sy, left, right)
    slot = (right - left) / max(len(bars), 1)
    bar_width = min(120.0, slot * 0.55)
    for index, (name, values) in enumerate(bars.items()):
        x = left + slot * index + (slot - bar_width) / 2
        base = 0.0
        for segment in segments:
            value = float(values.get(segment.name, 0) or 0)
            if value <= 0:
                continue
            y0, y1 = sy(base + value), sy(base)
            parts.append(
                f"<rect class='bar' data-category='{escape(name)}' "
                f"data-segment='{escape(segment.name)}' x='{x:.1f}' y='{y0:.1f}' "
                f"width='{bar_width:.1f}' height='{max(y1 - y0, 0.5):.1f}' "
                f"fill='{segment.color}'><title>{escape(name)} {escape(segment.name)}: "
                f"{format_number(value)}</title></rect>"
            )
            base += value
        parts.append(
            f"<text x='{x + bar_width / 2:.1f}' y='{sy(base) - 6:.1f}' text-anchor='middle' "
            f"fill='{TEXT_COLOR}' font-weight='600'>{format_number(base)}</text>"
            f"<text x='{x + bar_width / 2:.1f}' y='{bottom + 18}' text-anchor='middle' "
            f"fill='{TEXT_COLOR}'>{escape(name)}</text>"
        )
    parts.append(
        f"<line x1='{left}' y1='{bottom}' x2='{right}' y2='{bottom}' stroke='{AXIS_COLOR}'/>"
    )
    if not any(totals.values()):
        parts.append(
            f"<text x='{(left + right) / 2:.0f}' y='{(top + bottom) / 2:.0f}' "
            f"text-anchor='middle' fill='{AXIS_COLOR}' font-size='14'>{escape(empty_note)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def horizontal_bar_chart(
    plot_id: str,
    title: str,
    rows: Sequence[tuple[str, float, str]],
    *,
    legend: Sequence[tuple[str, str]] = (),
    empty_note: str = "nothing to show",
) -> str:
    """One horizontal bar per (label, value, color) row, value printed at the bar's end."""
    row_height = 24
    drop = _legend_drop(title, legend)
    top, left, right = 48 + drop, 250, WIDTH - 80
    height = top + row_height * max(len(rows), 1) + 20
    maximum = max((value for _, value, _ in rows), default=0.0)
    scale = (right - left) / maximum if maximum > 0 else 0.0
    parts = _open_svg(plot_id, title, height)
    parts += _legend(legend, 22 + drop)
    for index, (label, value, color) in enumerate(rows):
        y = top + row_height * index
        width = max(value * scale, 1.0 if value > 0 else 0.0)
        parts.append(
            f"<text x='{left - 8}' y='{y + 15}' text-anchor='end' fill='{TEXT_COLOR}'>"
            f"{escape(label)}</text>"
            f"<rect class='bar' data-category='{escape(label)}' x='{left}' y='{y + 3}' "
            f"width='{width:.1f}' height='{row_height - 7}' rx='2' fill='{color}'>"
            f"<title>{escape(label)}: {format_number(value)}</title></rect>"
            f"<text x='{left + width + 6:.1f}' y='{y + 15}' fill='{TEXT_COLOR}' "
            f"font-weight='600'>{format_number(value)}</text>"
        )
    parts.append(
        f"<line x1='{left}' y1='{top}' x2='{left}' y2='{height - 16}' stroke='{AXIS_COLOR}'/>"
    )
    if maximum <= 0:
        parts.append(
            f"<text x='{(left + right) / 2:.0f}' y='{top + 20 + row_height * len(rows) / 2:.0f}' "
            f"text-anchor='middle' fill='{AXIS_COLOR}' font-size='14'>{escape(empty_note)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
