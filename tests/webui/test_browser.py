"""The Chaos tab in a real browser: Debian's Chromium, headless, driven by Playwright
(its own browser downloads are never used: `executable_path` is the system binary).

Start a swarm from Locust's own form, open the Chaos tab, add a toxic with the tab's
form and see it listed, stop, and see the verdict (PASS) with a working report link.
The standalone page /chaos/ pauses and resumes a consumer, and arms and disarms a
crash point (its script sends the page's token). A page of another origin posting a form (or a JSON fetch) to the kill
route is refused and kills nothing (docs/security.md).
Without Chromium the test fails and says how to install it (scripts/setup.sh does).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from webui_helpers import LocustWebUI, start_locust_web

from harness.stack.local import Stack
from tests.support.browser import browser_page, chromium_path

LOAD_SECONDS = 12  # long enough for `mixed` to exercise every path it promises


@pytest.fixture()
def web(stack: Stack, tmp_path: Path) -> Iterator[LocustWebUI]:
    ui = start_locust_web("mixed", stack.root, tmp_path)
    try:
        yield ui
    finally:
        ui.stop()


@pytest.fixture()
def page(tmp_path: Path) -> Iterator[object]:
    with browser_page(tmp_path, width=1400, timeout_ms=30_000) as browser:
        yield browser


def test_swarm_toxic_stop_verdict_in_the_browser(web: LocustWebUI, stack: Stack, page: object,
                                                  tmp_path: Path) -> None:
    try:
        run(web, stack, page)
    except BaseException:
        page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)  # for whoever debugs it
        print(f"screenshot: {tmp_path / 'failure.png'}\nlocust log:\n{web.log.read_text()[-3000:]}")
        raise


def run(web: LocustWebUI, stack: Stack, page: object) -> None:
    page.goto(web.url + "/")
    # Locust's own start form.
    page.locator('input[name="userCount"]').fill("6")
    page.locator('input[name="spawnRate"]').fill("6")
    page.locator('input[name="host"]').fill(stack.info.app_url)
    page.get_by_role("button", name="Start").click()

    page.get_by_role("tab", name="Chaos").click()
    panel = page.locator("#harness-chaos")
    panel.wait_for()
    page.locator("#chaos-status").filter(has_text="test running").wait_for()
    run_id = web.get("/chaos/api/state").json()["run"]["id"]

    form = page.locator("#chaos-add-toxic")
    form.locator('select[name="proxy"]').select_option("app")
    form.locator('select[name="type"]').select_option("latency")
    form.locator('input[name="attributes"]').fill("latency=150 jitter=20")
    form.locator('input[name="toxicity"]').fill("0.3")
    form.locator('input[name="name"]').fill("browser_latency")
    form.locator("#chaos-add-toxic-button").click()
    listed = page.locator('#chaos-proxies tr[data-proxy="app"] li.chaos-toxic[data-toxic="browser_latency"]')
    listed.wait_for()
    assert "latency=150" in listed.inner_text()
    page.locator('#chaos-faults li[data-kind="toxic"]').wait_for()
    assert [t.name for t in stack.nemesis().list_toxics()] == ["browser_latency"]

    page.wait_for_timeout(LOAD_SECONDS * 1000)
    page.get_by_role("button", name="Stop").click()

    word = page.locator("#chaos-verdict-word")
    word.wait_for(timeout=120_000)
    verdict = web.get("/chaos/api/state").json()["verdict"]
    assert word.inner_text() == "PASS", verdict
    assert page.locator('#chaos-invariants tr[data-passed="false"]').count() == 0
    assert page.locator("#chaos-invariants tr[data-invariant]").count() == len(verdict["invariants"]) >= 7
    page.locator("#chaos-proxies li.chaos-toxic").first.wait_for(state="detached")  # healed by the check

    link = page.locator("#chaos-report")
    href = link.get_attribute("href")
    assert href and href.endswith(f"/chaos/runs/{run_id}/report.html")
    report = requests.get(href, timeout=10)
    assert report.status_code == 200 and "data-verdict='pass'" in report.text
    for name in ("settings.json", "baseline.ndjson", "export.ndjson", "final_reads.ndjson", "result.json",
                 "junit.xml", "report.html", "faults.jsonl"):
        assert (web.runs / run_id / name).is_file(), name


def service_status(web: LocustWebUI, name: str) -> str:
    services = web.get("/chaos/api/state", params={"fresh": "1"}).json()["services"]
    return str({row["name"]: row["status"] for row in services}[name])


def test_the_standalone_page_drives_processes_and_crash_points(web: LocustWebUI, page: object) -> None:
    """/chaos/ on its own: its script sends the page's token, as JSON, from this origin."""
    page.goto(web.url + "/chaos/")
    row = page.locator('#chaos-services tr[data-service="consumer-1"]')
    row.locator('button[data-action="pause"]').click()
    row.locator("td", has_text="paused").wait_for()
    assert service_status(web, "consumer-1") == "paused"
    row.locator('button[data-action="resume"]').click()
    row.locator("td", has_text="running").wait_for()
    assert service_status(web, "consumer-1") == "running"
    assert page.locator(".chaos-message").inner_text() == ""

    # A crash point armed with the tab's form, listed, and disarmed with its button.
    form = page.locator("#chaos-arm-crash-point")
    form.locator('select[name="point"]').select_option("api.after_domain")
    form.locator('select[name="action"]').select_option("delay")
    form.locator('input[name="probability"]').fill("0.25")
    form.locator('input[name="delay_ms"]').fill("7")
    form.locator("#chaos-arm-button").click()
    armed = page.locator('#chaos-crash-points tr[data-point="api.after_domain"][data-armed="yes"]')
    armed.wait_for()
    assert "delay 7ms probability=0.25" in armed.inner_text()
    page.locator('#chaos-faults li[data-kind="crash_point"][data-target="api.after_domain"]').wait_for()
    point = {row["name"]: row for row in web.get("/chaos/api/state", params={"fresh": "1"}).json()["crash_points"]}
    assert point["api.after_domain"]["armed"] == {"action": "delay", "probability": 0.25, "count": None, "delay_ms": 7}
    armed.locator('button[data-action="disarm"]').click()
    page.locator('#chaos-crash-points tr[data-point="api.after_domain"][data-armed="no"]').wait_for()
    assert page.locator(".chaos-message").inner_text() == ""


def test_a_page_of_another_origin_cannot_drive_the_tab(web: LocustWebUI, page: object) -> None:
    """The attack of issue 19 in a real browser: a page of another origin (served by
    Playwright itself, no network) posts a plain form to the kill route, and tries a
    JSON fetch with the token it cannot read. The tab refuses both; consumer-1 lives."""
    kill = web.url + "/chaos/api/services/consumer-1/kill"
    evil = ("<!doctype html><html><body><form id='f' method='post' action='" + kill + "'>"
            "<input name='x' value='1'></form><script>"
            "fetch('" + kill + "', {method: 'POST', headers: {'Content-Type': 'application/json',"
            " 'X-Chaos-Token': 'guessed'}, body: '{}'}).then(r => document.title = 'fetch ' + r.status,"
            " e => document.title = 'fetch blocked');"
            "</script></body></html>")
    page.route("http://evil.example/", lambda route: route.fulfill(body=evil, content_type="text/html"))
    page.goto("http://evil.example/")
    page.wait_for_function("document.title.startsWith('fetch')")
    assert page.title() == "fetch blocked"  # the preflight is not answered for evil.example
    assert service_status(web, "consumer-1") == "running"
    page.evaluate("document.getElementById('f').submit()")
    page.wait_for_url(kill)
    body = page.locator("body").inner_text()
    assert "Cross-site request refused" in body and "403" in body, body
    assert service_status(web, "consumer-1") == "running"


def test_missing_chromium_fails_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support import browser

    monkeypatch.setattr(browser.shutil, "which", lambda name: None)
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        chromium_path()


def test_setup_installs_chromium_and_playwright() -> None:
    """`make test` on a fresh machine: scripts/setup.sh installs Debian's chromium when
    it is missing, and the dev extra brings Playwright (which never downloads a browser here)."""
    from webui_helpers import REPO

    setup = (REPO / "scripts" / "setup.sh").read_text()
    # install_missing PACKAGE COMMAND: apt-get installs the package when the command is missing.
    assert "\ninstall_missing chromium chromium\n" in setup
    assert 'command -v "$command"' in setup and 'apt-get install -y -qq "$package"' in setup
    assert "playwright install" not in setup
    assert '"playwright>=' in (REPO / "pyproject.toml").read_text()
