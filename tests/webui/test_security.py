"""The Chaos tab is safe by default, on a real Locust web UI and stack
(harness.webui.guard, docs/security.md):

- the forged requests of issue 19 (a form post with a browser's User-Agent from
  another origin, no token; and each defence alone: other Origin or Referer, form
  encoding, missing or wrong token, a foreign Host) get 403 problem+json and change
  nothing: the consumer is not killed, no toxic is added, no test is started;
- the tab's own page, same origin, JSON, token: the same calls work;
- with no --web-host the web UI listens on 127.0.0.1 only;
- with --web-login the tab's routes refuse a request without the login.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from webui_helpers import LocustWebUI, start_locust_web

from harness.stack.local import Stack

BROWSER = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"
EVIL = "http://evil.example"
KILL = "/chaos/api/services/consumer-1/kill"


@pytest.fixture(scope="module")
def web(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocustWebUI]:
    ui = start_locust_web("mixed", stack.root, tmp_path_factory.mktemp("web"))
    try:
        yield ui
    finally:
        ui.stop()


def consumer_status(web: LocustWebUI) -> str:
    services = web.get("/chaos/api/state", params={"fresh": "1"}).json()["services"]
    return str({row["name"]: row["status"] for row in services}["consumer-1"])


def forged(web: LocustWebUI, case: str) -> requests.Response:
    """One forged request: `case` names which defence it meets (the others it passes)."""
    token = {"X-Chaos-Token": web.token}
    as_json = {"Content-Type": "application/json"}
    if case == "the issue's form post":  # curl -X POST -H 'Origin: http://evil.example' ... --data x=1
        return requests.post(web.url + KILL, data={"x": "1"}, timeout=10,
                             headers={"Origin": EVIL, "User-Agent": BROWSER})
    headers = {"User-Agent": BROWSER, **as_json, **token}
    body: bytes | str = b"{}"
    if case == "other origin":
        headers["Origin"] = EVIL
    elif case == "other referer":
        headers["Referer"] = f"{EVIL}/page.html"
    elif case == "null origin":  # a sandboxed frame, a file:// page
        headers["Origin"] = "null"
    elif case == "same origin, form-encoded":
        headers.update(Origin=web.url, **{"Content-Type": "application/x-www-form-urlencoded"})
        body = "x=1"
    elif case == "same origin, text/plain":  # what a form with enctype=text/plain sends
        headers.update(Origin=web.url, **{"Content-Type": "text/plain"})
    elif case == "same origin, no token":
        headers["Origin"] = web.url
        del headers["X-Chaos-Token"]
    elif case == "same origin, wrong token":
        headers.update(Origin=web.url, **{"X-Chaos-Token": web.token + "x"})
    elif case == "foreign host (DNS rebinding)":
        headers.update(Host=f"evil.example:{web.url.rsplit(':', 1)[1]}", Origin=f"{EVIL}:{web.url.rsplit(':', 1)[1]}")
    else:
        raise AssertionError(case)
    return requests.post(web.url + KILL, data=body, headers=headers, timeout=10)


CASES = ("the issue's form post", "other origin", "other referer", "null origin", "same origin, form-encoded",
         "same origin, text/plain", "same origin, no token", "same origin, wrong token",
         "foreign host (DNS rebinding)")


@pytest.mark.parametrize("case", CASES)
def test_a_forged_request_is_refused_and_kills_nothing(web: LocustWebUI, case: str) -> None:
    assert consumer_status(web) == "running"
    response = forged(web, case)
    assert response.status_code == 403, response.text
    assert response.headers["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == 403 and problem["type"] and problem["title"] and problem["detail"]
    assert consumer_status(web) == "running"


def test_a_forged_toxic_and_a_forged_start_change_nothing(web: LocustWebUI, stack: Stack) -> None:
    toxic = {"proxy": "app", "type": "latency", "attributes": {"latency": 500}, "name": "forged"}
    added = requests.post(web.url + "/chaos/api/toxics", json=toxic, timeout=10, headers={"Origin": EVIL,
                                                                                          "X-Chaos-Token": web.token})
    assert added.status_code == 403
    assert stack.nemesis().list_toxics() == []
    # Locust's own start form too: a page of another origin starts no swarm.
    before = web.get("/chaos/api/state", params={"fresh": "1"}).json()
    started = requests.post(web.url + "/swarm", data={"user_count": "2", "spawn_rate": "2",
                                                       "host": stack.info.app_url},
                            headers={"Origin": EVIL, "User-Agent": BROWSER}, timeout=10)
    assert started.status_code == 403 and started.json()["success"] is False
    after = web.get("/chaos/api/state", params={"fresh": "1"}).json()
    assert after["runner_state"] == before["runner_state"] != "running"
    assert after["run"] == before["run"]


def test_a_forged_crash_point_arming_arms_nothing(web: LocustWebUI) -> None:
    path = "/chaos/api/crash-points/consumer.after_effect"
    for headers, body in (({"Origin": EVIL, "User-Agent": BROWSER}, {"action": "crash"}),
                          ({"Origin": EVIL, "X-Chaos-Token": web.token}, {"action": "crash"})):
        refused = requests.post(web.url + path, data=body if "X-Chaos-Token" not in headers else None,
                                json=body if "X-Chaos-Token" in headers else None, headers=headers, timeout=10)
        assert refused.status_code == 403, refused.text
    for headers in ({"Origin": EVIL}, {}):  # clearing is a change too
        assert requests.delete(web.url + "/chaos/api/crash-points", headers=headers, timeout=10).status_code == 403
    points = web.get("/chaos/api/state", params={"fresh": "1"}).json()["crash_points"]
    assert points and all(point["armed"] is None for point in points)


def test_the_tabs_own_calls_work(web: LocustWebUI, stack: Stack) -> None:
    """Same origin (as the browser sends it), JSON and the page's token: done."""
    headers = {"Origin": web.url, "Referer": web.url + "/chaos/", "X-Chaos-Token": web.token, "User-Agent": BROWSER}
    paused = requests.post(web.url + "/chaos/api/services/consumer-1/pause", json={}, headers=headers, timeout=10)
    assert paused.status_code == 200, paused.text
    assert consumer_status(web) == "paused"
    assert web.act("POST", "/chaos/api/services/consumer-1/resume").status_code == 200
    assert consumer_status(web) == "running"
    added = requests.post(web.url + "/chaos/api/toxics", headers=headers, timeout=10,
                          json={"proxy": "app", "type": "latency", "attributes": {"latency": 10}, "name": "own"})
    assert added.status_code == 200, added.text
    assert [t.name for t in stack.nemesis().list_toxics()] == ["own"]
    assert web.act("POST", "/chaos/api/heal").status_code == 200
    assert stack.nemesis().list_toxics() == []


def test_get_changes_nothing_and_other_origins_cannot_read(web: LocustWebUI) -> None:
    killed = web.get(KILL)  # a link or an <img> is a GET
    assert killed.status_code == 405
    assert consumer_status(web) == "running"
    for path in ("/", "/chaos/", "/chaos/api/state"):
        answer = web.get(path, headers={"Origin": EVIL})
        assert answer.status_code == 200
        assert answer.headers.get("Access-Control-Allow-Origin") == web.url, path  # not "*", not evil
    page = web.get("/chaos/")
    assert page.headers["Cache-Control"] == "no-store" and f'data-chaos-token="{web.token}"' in page.text
    assert f'data-chaos-token="{web.token}"' in web.get("/").text
    preflight = requests.options(web.url + KILL, timeout=10, headers={
        "Origin": EVIL, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-chaos-token"})
    assert preflight.headers.get("Access-Control-Allow-Origin") != EVIL


def listening_addresses(port: int) -> set[str]:
    """The local addresses that listen on TCP `port`, from /proc/net/tcp and tcp6."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def test_without_web_host_the_web_ui_listens_on_loopback_only(stack: Stack, tmp_path: Path) -> None:
    ui = start_locust_web("timeout_replay", stack.root, tmp_path, web_host=None)
    try:
        port = int(ui.url.rsplit(":", 1)[1])
        assert listening_addresses(port) == {"0100007F"}, listening_addresses(port)  # 127.0.0.1, little-endian
        assert "WARNING: the Chaos tab is served on" not in ui.log.read_text()
    finally:
        ui.stop()


def test_web_login_covers_the_tab(stack: Stack, tmp_path: Path) -> None:
    password = "correct horse battery staple"
    ui = start_locust_web("timeout_replay", stack.root, tmp_path, extra=["--web-login"],
                          env={"HARNESS_WEB_PASSWORD": password}, auth=("harness", password))
    try:
        for path in ("/", "/chaos/", "/chaos/api/state", "/chaos/api/plans/flaky-network"):
            refused = requests.get(ui.url + path, timeout=10)
            assert refused.status_code == 401, path
            assert "data-chaos-token" not in refused.text
            assert requests.get(ui.url + path, auth=("harness", "wrong"), timeout=10).status_code == 401
        killed = requests.post(ui.url + KILL, json={}, headers={"X-Chaos-Token": ui.token}, timeout=10)
        assert killed.status_code == 401
        assert consumer_status(ui) == "running"
        assert ui.get("/chaos/api/state").status_code == 200  # logged in
        assert ui.act("POST", "/chaos/api/heal").status_code == 200
    finally:
        ui.stop()


def test_web_login_without_a_password_stops_locust(stack: Stack, tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="HARNESS_WEB_PASSWORD"):
        start_locust_web("timeout_replay", stack.root, tmp_path, extra=["--web-login"])


ATTACH = """
import json, logging, sys
from locust.argument_parser import parse_options
from locust.env import Environment
from harness.webui.chaos import attach

logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(message)s")
results = []
for web_host in json.loads(sys.argv[1]):
    options = parse_options(args=["-f", "harness/locustfiles/mixed.py", *(["--web-host", web_host] if web_host else [])])
    environment = Environment(user_classes=[], parsed_options=options)
    environment.create_local_runner()
    # delayed_start: nothing is bound; Locust binds web_ui.host at start(), after the init event.
    web_ui = environment.create_web_ui(host=web_host, port=8089, delayed_start=True)
    tab = attach(environment)
    print(f"-- {web_host!r}", file=sys.stderr, flush=True)
    results.append({"bind": web_ui.host, "loopback_only": tab.guard.loopback_only})
print(json.dumps(results))
"""


def test_the_bind_address_and_the_warning_when_the_tab_is_attached() -> None:
    """attach() on a web UI Locust has made but not started (no socket is bound here):
    no --web-host becomes 127.0.0.1; every interface or another address is kept, with a warning."""
    import json
    import subprocess
    import sys

    from webui_helpers import REPO, clean_env

    hosts = ["", "127.0.0.1", "0.0.0.0", "192.0.2.10"]
    completed = subprocess.run([sys.executable, "-c", ATTACH, json.dumps(hosts)], cwd=REPO, env=clean_env(),
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads(completed.stdout.splitlines()[-1])  # parse_options prints a deprecation line
    assert results == [{"bind": "127.0.0.1", "loopback_only": True}, {"bind": "127.0.0.1", "loopback_only": True},
                       {"bind": "0.0.0.0", "loopback_only": False}, {"bind": "192.0.2.10", "loopback_only": False}]
    sections = completed.stderr.split("-- ")
    warned = [("WARNING: the Chaos tab is served on" in section) for section in sections[:4]]
    assert warned == [False, False, True, True], completed.stderr
    assert "every interface" in sections[2] and "kill the stack's processes" in sections[2]
    assert "192.0.2.10" in sections[3]
