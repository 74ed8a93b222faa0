"""SVG charts: round ticks, fault windows clamped to the run, escaped labels."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from html_probe import SVG

from harness.report.plots import (
    FaultWindow,
    Segment,
    Series,
    horizontal_bar_chart,
    line_chart,
    nice_step,
    stacked_bar_chart,
)


def test_nice_steps() -> None:
    assert [nice_step(v) for v in (0.07, 3, 4.4, 242, 1000)] == [0.1, 5.0, 5.0, 500.0, 1000.0]


def test_windows_are_clamped_to_the_plot_and_lines_break_on_gaps() -> None:
    svg = ET.fromstring(line_chart(
        "latency", "Latency", [Series("p50", "#000", [(0.5, 1.0), (1.5, None), (2.5, 3.0)])],
        duration=10.0,
        windows=[FaultWindow(-5.0, 2.0, "early"), FaultWindow(8.0, 50.0, "late & <long>")]))
    rects = [r for r in svg.iter(f"{SVG}rect") if r.get("class") == "fault-window"]
    assert len(rects) == 2
    for rect in rects:
        x, width = float(rect.get("x")), float(rect.get("width"))
        assert 64 <= x and x + width <= 940 + 0.01
    assert {r.get("data-fault") for r in rects} == {"early", "late & <long>"}
    assert len([p for p in svg.iter(f"{SVG}polyline")]) == 2  # the None splits the line


def test_bar_charts_show_values_and_empty_notes() -> None:
    bars = ET.fromstring(stacked_bar_chart(
        "outcomes", "Outcomes", {"pay": {"ok": 3, "fail": 1}}, [Segment("ok", "#0f0"),
                                                               Segment("fail", "#f00")]))
    texts = [t.text for t in bars.iter(f"{SVG}text")]
    assert "4" in texts and "pay" in texts
    empty = ET.fromstring(horizontal_bar_chart("layers", "Layers", [("api · replays", 0, "#00f")],
                                               empty_note="no duplicates stopped"))
    assert "no duplicates stopped" in [t.text for t in empty.iter(f"{SVG}text")]
