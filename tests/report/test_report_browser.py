"""report.html in headless Chromium: a violation's timeline is really drawn (lanes,
bars, fault windows, crash-point hits) and the Redis warning is shown, from file://.

Debian's Chromium through Playwright, as tests/webui/test_browser.py drives it
(`executable_path` is the system binary; Playwright's own downloads are never used).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from report_sample import START, build_run, typed

from harness.report.run_facts import RedisCapture, RedisSettings
from harness.report.run_report import write_reports
from harness.run.rundir import RunDir
from tests.support.browser import browser_page

CRASH_FAULT = {"name": "crash-after-effect", "kind": "crash_point", "target": "consumer.after_effect",
               "action": "crash", "crash_point": "consumer.after_effect", "probability": 0.5, "count": 3,
               "start": START + 19.0, "end": START + 20.6, "error": None, "hits": 1,
               "hit_times": [START + 19.5]}


@pytest.fixture()
def page(tmp_path: Path) -> Iterator[Any]:
    with browser_page(tmp_path) as browser:
        yield browser


@pytest.mark.slow
def test_the_timeline_and_the_redis_warning_render_in_chromium(page: Any, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = build_run(run_dir, failing=True)
    with open(run_dir / "faults.jsonl", "ab") as log:
        log.write(orjson.dumps(CRASH_FAULT, option=orjson.OPT_APPEND_NEWLINE))
    RunDir(run_dir).write_redis_capture(RedisCapture(
        before=RedisSettings(at=START, maxmemory=3 * 1024 * 1024, maxmemory_policy="allkeys-lru",
                             appendonly=True, save="", evicted_keys=0),
        after=RedisSettings(at=START + 60, maxmemory=3 * 1024 * 1024, maxmemory_policy="allkeys-lru",
                            appendonly=True, save="", evicted_keys=420)))
    report = write_reports(RunDir(run_dir), typed(result)).report_html
    page.goto(report.as_uri())

    timeline = page.locator("details.violation svg.timeline").first
    assert timeline.get_attribute("data-timeline") == "order ord_7f3a"
    assert timeline.is_visible()
    box = timeline.bounding_box()
    assert box is not None and box["width"] > 600 and box["height"] > 60
    lanes = timeline.locator("g.lane[data-kind='process']")
    assert lanes.count() >= 3
    bars = timeline.locator("rect.op")
    assert bars.count() >= 10
    outcomes = set(timeline.locator("rect.op").evaluate_all("bars => bars.map(b => b.dataset.outcome)"))
    assert {"ok", "info"} <= outcomes
    # Each bar is laid out with a real size inside its lane, not collapsed.
    sizes = bars.evaluate_all("bars => bars.map(b => { const r = b.getBoundingClientRect();"
                              " return [r.width, r.height]; })")
    assert all(width >= 1 and height >= 5 for width, height in sizes)
    colors = set(bars.evaluate_all("bars => bars.map(b => getComputedStyle(b).fill)"))
    assert len(colors) >= 2  # ok and info are told apart by colour
    assert timeline.locator("rect.fault-window").count() >= 2
    assert timeline.locator("line.crash-hit").count() == 1

    warning = page.locator("#warnings p.warning")
    assert warning.count() == 2 and warning.first.is_visible()
    assert "allkeys-lru" in warning.first.inner_text()
    assert "420" in warning.nth(1).inner_text()
    timeline.screenshot(path=str(tmp_path / "timeline.png"))  # for whoever looks at it
