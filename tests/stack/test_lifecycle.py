"""up → healthy → traffic through the proxies → down → nothing left; also when the
`harness up` process is SIGKILLed mid-start, and with a stale state file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import requests

from harness.cli.main import main
from harness.process_handle import pid_alive
from harness.stack import registry
from harness.stack import services as svc
from harness.stack.info import ServiceInfo, StackInfo, read_info, write_info
from harness.stack.local import (
    StackAlreadyRunning,
    StackError,
    StackSettings,
    open_stack,
    start_stack,
)
from harness.toxiproxy.server import EmbeddedToxiproxy
from tests.stack.conftest import create_order, stack_ports, wait_until_gone
from tests.support.cli import run_harness, start_harness
from tests.support.stacks import sample_info, small_settings


def test_up_serves_through_the_proxies_and_down_leaves_nothing(tmp_path: Path) -> None:
    root = tmp_path / ".harness"
    stack = start_stack(small_settings(root, consumers=2, env={"TARGET_APP_INFLIGHT_LEASE": "7"}))
    info = stack.info
    ports = stack_ports(info)
    try:
        assert stack.health() == {"redis": True, "toxiproxy": True, "app": True,
                                  "consumer-1": True, "consumer-2": True}
        assert info.app_url != info.app_direct_url
        created = create_order(info.app_url)
        assert created.status_code == 201, created.text
        order_id = created.json()["id"]
        fetched = requests.get(f"{info.app_direct_url}/api/v1/orders/{order_id}", timeout=5)
        assert fetched.status_code == 200 and fetched.json()["id"] == order_id
        # the app reaches redis through the redis proxy; the direct url is the same data
        assert redis.Redis.from_url(info.redis_url).ping()
        assert redis.Redis.from_url(info.redis_proxy_url).ping()
        # TARGET_APP_* given, the proxy redis url and the generated secret reach app and consumers
        for name in ("app", "consumer-2"):
            environ = Path(f"/proc/{info.service(name).pid}/environ").read_bytes().split(b"\0")
            assert b"TARGET_APP_INFLIGHT_LEASE=7" in environ
            assert f"TARGET_APP_REDIS_URL={info.redis_proxy_url}".encode() in environ
            assert f"TARGET_APP_WEBHOOK_SECRET={info.webhook_secret}".encode() in environ
        assert b"TARGET_APP_CONSUMER_NAME=consumer-2" in Path(
            f"/proc/{info.services[-1].pid}/environ").read_bytes().split(b"\0")
        with pytest.raises(StackAlreadyRunning):
            start_stack(small_settings(root))
        assert (root / "logs" / "app.log").is_file()
    finally:
        stack.down()
    assert wait_until_gone(root, ports) == ([], [])
    assert read_info(root) is None
    assert open_stack(root) is None


def test_state_file_has_the_documented_shape(tmp_path: Path) -> None:
    with start_stack(small_settings(tmp_path / "h", consumers=0)) as stack:
        state = json.loads((tmp_path / "h" / "state.json").read_text())
        for key in ("mode", "started_at", "root", "app_url", "app_direct_url", "toxiproxy_url",
                    "toxiproxy_kind", "redis_url", "redis_proxy_url", "webhook_secret", "stream",
                    "group", "unsafe_disable", "services"):
            assert key in state, key
        assert state["mode"] == "local" and state["toxiproxy_kind"] == "embedded"
        assert state["unsafe_disable"] == [] and state["stream"] == "payments"
        assert [row["name"] for row in state["services"]] == ["redis", "toxiproxy", "app"]
        assert all({"name", "pid", "port", "log"} <= set(row) for row in state["services"])
        # The file a real supervisor wrote is a StackInfo, and writes back to the same JSON.
        info = StackInfo.from_json(state, tmp_path / "h" / "state.json")
        assert info.to_json() == state and stack.info == info
        assert info.mode == "local" and info.phase == "running" and info.owner == "up"
        assert info.root == str((tmp_path / "h").resolve()) and info.supervisor_pid is not None
        assert info.compose_file is None and info.service_names == ("redis", "toxiproxy", "app")
        ports = stack_ports(stack.info)
    assert wait_until_gone(tmp_path / "h", ports) == ([], [])


def test_cli_up_status_down_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(tmp_path / "h")
    assert main(["up", "--root", root, "--app-workers", "1", "--consumers", "1"]) == 0
    out = capsys.readouterr().out
    info = read_info(Path(root))
    assert info is not None and info.app_url in out
    try:
        assert main(["up", "--root", root]) == 0
        assert "already running" in capsys.readouterr().out
        assert main(["status", "--root", root, "--json"]) == 0
        document = json.loads(capsys.readouterr().out)
        for key in ("app_url", "app_direct_url", "toxiproxy_url", "redis_url", "services", "faults"):
            assert key in document, key
        assert {row["name"] for row in document["services"]} == {"redis", "toxiproxy", "app", "consumer-1"}
        assert all(set(row) >= {"name", "pid", "port", "healthy"} and row["healthy"]
                   for row in document["services"])
        assert document["faults"] == []
        assert main(["status", "--root", root]) == 0
        table = capsys.readouterr().out
        assert "consumer-1" in table and "faults: none" in table
        assert main(["status", "--root", root, "--env"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert f"export HARNESS_REDIS_URL={info.redis_url}" in lines
        assert f"export TARGET_APP_WEBHOOK_SECRET={info.webhook_secret}" in lines
        assert f"export LOCUST_HOST={info.app_url}" in lines
    finally:
        assert main(["down", "--root", root]) == 0
    assert "stopped" in capsys.readouterr().out
    assert wait_until_gone(Path(root), stack_ports(info)) == ([], [])
    assert main(["down", "--root", root]) == 0
    assert "no stack is running" in capsys.readouterr().out


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return run_harness(*args, timeout=120)


def test_the_stack_outlives_harness_up_and_harness_down_stops_it(tmp_path: Path) -> None:
    root = tmp_path / "h"
    up = harness("up", "--root", str(root), "--app-workers", "1", "--consumers", "1")
    assert up.returncode == 0, up.stderr
    info = read_info(root)
    assert info is not None and info.app_url in up.stdout
    try:
        time.sleep(0.5)  # the `harness up` process is gone; the stack must not follow it
        stack = open_stack(root)
        assert stack is not None and all(stack.health().values())
        assert create_order(info.app_url).status_code == 201
        status = harness("status", "--root", str(root), "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["app_url"] == info.app_url
    finally:
        down = harness("down", "--root", str(root))
    assert down.returncode == 0, down.stderr
    assert wait_until_gone(root, stack_ports(info)) == ([], [])


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT])
def test_harness_up_killed_mid_start_leaves_nothing(tmp_path: Path, signum: int) -> None:
    root = tmp_path / "h"
    process = start_harness("up", "--root", str(root), "--app-workers", "2", "--consumers", "2",
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Wait until the supervisor has started some services but is not ready yet.
    deadline = time.monotonic() + 20
    started: StackInfo | None = None
    while time.monotonic() < deadline:
        info = read_info(root)  # never half a file: written with an atomic rename
        if info is not None and any(service.pid for service in info.services):
            started = info
            break
        time.sleep(0.01)
    assert started is not None, "the supervisor never started a service"
    assert started.phase == "starting" and started.supervisor_pid is not None
    process.send_signal(signum)
    assert process.wait(timeout=30) == (-signal.SIGKILL if signum == signal.SIGKILL else 130)
    processes, listening = wait_until_gone(root, stack_ports(started), pids=(started.supervisor_pid,))
    assert processes == [] and listening == []
    assert open_stack(root) is None


def test_stale_state_is_detected_and_cleaned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "h"
    root.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = sample_info(root=str(root), supervisor_pid=dead.pid, app_url="http://127.0.0.1:1",
                        redis_proxy_url="redis://127.0.0.1:1/0", toxiproxy_url="",
                        services=(ServiceInfo("app", os.getpid(), None, None, "running"),))
    write_info(root, stale)
    assert open_stack(root) is None
    assert not (root / "state.json").exists()
    assert pid_alive(os.getpid())  # a recorded pid that is not ours is never signalled
    write_info(root, sample_info(root=str(root), supervisor_pid=dead.pid, toxiproxy_url="", services=()))
    assert main(["status", "--root", str(root)]) == 0
    assert "no stack is running" in capsys.readouterr().out


def test_a_service_that_cannot_start_is_named_with_its_log(tmp_path: Path) -> None:
    root = tmp_path / "h"
    settings = small_settings(root, env={"TARGET_APP_UNSAFE_DISABLE": "not-a-layer"}, health_timeout=10.0)
    with pytest.raises(StackError) as caught:
        start_stack(settings)
    message = str(caught.value)
    assert message.startswith("app ") and "app.log" in message.splitlines()[0]
    last_line = (root / "logs" / "app.log").read_text().strip().splitlines()[-1]
    assert last_line in message  # the end of the app's log
    assert "not-a-layer" in (root / "logs" / "app.log").read_text()
    assert svc.marked_processes(str(root.resolve())) == []
    assert open_stack(root) is None


def test_settings_are_validated() -> None:
    with pytest.raises(StackError):
        StackSettings(app_workers=0)
    with pytest.raises(StackError):
        StackSettings(env={"PATH": "/bin"})


def test_an_external_toxiproxy_gets_the_proxies_and_loses_them_at_down(
        tmp_path: Path, embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    from harness.nemesis.toxiproxy_client import Nemesis

    root = tmp_path / "h"
    stack = start_stack(small_settings(root, consumers=0, toxiproxy_url=embedded_toxiproxy.url))
    try:
        info = stack.info
        assert info.toxiproxy_kind == "external" and info.toxiproxy_url == embedded_toxiproxy.url
        assert info.service_names == ("redis", "app")
        assert set(Nemesis(embedded_toxiproxy.url).proxies()) == {"app", "redis"}
        assert stack.health() == {"redis": True, "app": True, "toxiproxy": True}
        assert create_order(info.app_url).status_code == 201
        with pytest.raises(StackError, match="unknown service"):
            stack.kill("toxiproxy")
        ports = stack_ports(info)
    finally:
        stack.down()
    assert Nemesis(embedded_toxiproxy.url).proxies() == {}
    assert wait_until_gone(root.resolve(), ports) == ([], [])


def test_proxies_a_stack_could_not_delete_are_logged_and_fail_down(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A shared Toxiproxy gone at `down`: the supervisor's failed deletes are in its log,
    `down` names the proxies left (a StackError: exit 2 from `harness down`) and their
    lease stays in the registry for the next up/down to reclaim."""
    root = (tmp_path / "h").resolve()
    toxiproxy = EmbeddedToxiproxy().start()
    try:
        stack = start_stack(small_settings(root, consumers=0, toxiproxy_url=toxiproxy.url, proxy_prefix="t-"))
        ports = stack_ports(stack.info)
    finally:
        toxiproxy.stop()
    assert main(["down", "--root", str(root)]) == 2
    message = capsys.readouterr().err
    assert "proxy t-app on" in message and "proxy t-redis on" in message and "supervisor.log" in message
    log = (root / "logs" / "supervisor.log").read_text()
    assert "could not delete proxy t-app" in log and "could not delete proxy t-redis" in log
    kept = [lease for _, lease in registry.leases() if lease.root == str(root)]
    # Redis's proxy is made before the app starts, the app's after (harness.stack.supervisor).
    assert [claim.name for lease in kept for claim in lease.proxies] == ["t-redis", "t-app"]
    assert wait_until_gone(root, ports) == ([], [])
    for lease in kept:  # this test's Toxiproxy never comes back: its leftovers are nobody's
        registry.remove_lease(lease.id)
