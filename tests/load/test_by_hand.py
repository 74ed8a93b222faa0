"""A locustfile run by hand against `harness up`, as a new user would: no `eval`, no
HARNESS_* variable, no --host. The Locust process finds the stack's state file under
the current directory and takes the host, the webhook secret, Redis, the stream and
Toxiproxy from it, and records its history into a swarm run directory of its own.
Its web UI offers every harness option, the secret as a masked field, and the
stack's app as the host."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from harness.load.settings import OPTIONS
from harness.ports import free_port
from tests.load.locust_run import LOCUSTFILES, completions, records
from tests.support.cli import clean_env, run_harness


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    work = tmp_path_factory.mktemp("by-hand")
    env = clean_env(HARNESS_REGISTRY=str(work / "registry"))
    up = run_harness("up", "--app-workers", "2", "--consumers", "1", cwd=work, env=env, timeout=300)
    assert up.returncode == 0, up.stderr[-2000:]
    try:
        yield work, env
    finally:
        run_harness("down", cwd=work, env=env, timeout=300)


@pytest.mark.slow
def test_a_swarm_by_hand_needs_no_eval_and_records_history(workdir: tuple[Path, dict[str, str]]) -> None:
    work, env = workdir
    result = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILES / "mixed.py"), "--headless",
         # 8 s from the users' start (--harness-run-time; -t only caps it): on a busy machine
         # Locust's own 4 s clock left too few operations to hold a validly signed webhook.
         "-u", "4", "-r", "4", "-t", "60s", "--harness-run-time", "8", "--stop-timeout", "3", "--only-summary",
         "--exit-code-on-error", "0"],
        cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    (histories,) = (work / "runs").glob("swarm-*/histories")
    assert f"recording histories in {histories}" in result.stderr
    recorded = records(histories)
    done = completions(recorded)
    invokes = {r["op_id"]: r for r in recorded if r["type"] == "invoke"}
    webhooks = [(invokes[op_id], c) for op_id, c in done.items() if invokes[op_id]["op"] == "webhook"]
    signed = [(i, c) for i, c in webhooks if not i.get("must_reject")]
    assert signed, "no validly signed webhook was sent"
    # The stack's random secret was found: no validly signed webhook is refused as unsigned.
    assert not [c for _, c in signed if c.get("status") == 401]
    assert any(c["type"] == "ok" for _, c in signed)
    # Redis and the stream came from the state file too: messages were published.
    assert any(invokes[op_id]["op"] == "publish" and c["type"] == "ok" for op_id, c in done.items())
    # Toxiproxy as well: each completion knows whether a toxic was active (none was).
    assert {c.get("toxic_hit") for c in done.values() if invokes[c["op_id"]]["op"] != "publish"} == {False}


@pytest.mark.slow
def test_the_web_ui_offers_every_option_with_the_stack_as_host(workdir: tuple[Path, dict[str, str]]) -> None:
    work, env = workdir
    state = json.loads((work / ".harness" / "state.json").read_text())
    port = free_port()
    ui = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILES / "mixed.py"), "--web-host", "127.0.0.1",
         "--web-port", str(port)], cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        page = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not page:
            try:
                page = requests.get(f"http://127.0.0.1:{port}/", timeout=2).text
            except requests.ConnectionError:
                time.sleep(0.2)
    finally:
        ui.terminate()
        ui.wait(15)
    assert page, "the web UI did not answer"
    for spec in OPTIONS:
        assert f'"{spec.dest}"' in page, spec.dest
    secret = re.search(r'"harness_webhook_secret":\s*\{[^}]*"is_secret":\s*true', page)
    assert secret, "the webhook secret is not a masked field"
    assert state["webhook_secret"] not in page  # the stack's secret is never shown
    assert state["app_url"] in page  # the host field is the stack's app
