"""Process faults through the supervisor: kill -9, pause/resume, restart, start; each
on its own stack because they break things."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import requests

from harness.cli.main import main
from harness.process_handle import pid_alive
from harness.stack.local import Stack, StackError, open_stack, start_stack
from tests.stack.conftest import create_order, stack_ports, wait_until_gone
from tests.support.stacks import small_settings


def pid_of(stack: Stack, name: str) -> int | None:
    return stack.info.service(name).pid


def get_order(base_url: str, order_id: str, attempts: int = 50) -> requests.Response:
    """GET an order, riding out the 503s of a pool that reconnects after a restart."""
    response = requests.get(f"{base_url}/api/v1/orders/{order_id}", timeout=5)
    for _ in range(attempts):
        if response.status_code != 503:
            break
        time.sleep(0.1)
        response = requests.get(f"{base_url}/api/v1/orders/{order_id}", timeout=5)
    return response


def test_redis_kill_9_and_restart_keeps_every_acknowledged_order(tmp_path: Path) -> None:
    root = tmp_path / "h"
    with start_stack(small_settings(root, consumers=1)) as stack:
        app_url = stack.info.app_url
        acknowledged = []
        for index in range(30):
            response = create_order(app_url, key=f"kill9-{index}")
            assert response.status_code == 201, response.text
            acknowledged.append(response.json()["id"])
        old_pid = pid_of(stack, "redis")
        stack.kill("redis")
        assert not pid_alive(old_pid)
        assert stack.info.service("redis").status == "killed"
        assert stack.health()["redis"] is False
        assert create_order(app_url).status_code == 503  # down, and the app says so
        stack.restart("redis")
        assert pid_of(stack, "redis") != old_pid
        assert stack.health()["redis"] is True
        for order_id in acknowledged:
            response = get_order(app_url, order_id)
            assert response.status_code == 200, (order_id, response.status_code)
            assert response.json()["id"] == order_id
        ports = stack_ports(stack.info)
    assert wait_until_gone(root.resolve(), ports) == ([], [])


def test_app_kill_start_pause_resume_by_hand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "h"
    with start_stack(small_settings(root, consumers=0)) as stack:
        app_url, direct = stack.info.app_url, stack.info.app_direct_url
        assert main(["fault", "kill", "app", "--root", str(root)]) == 0
        assert main(["fault", "list", "--root", str(root)]) == 0
        assert "process app: killed" in capsys.readouterr().out
        assert stack.health()["app"] is False
        with pytest.raises(requests.RequestException):
            requests.get(f"{direct}/healthz", timeout=2)
        assert main(["fault", "start", "app", "--root", str(root)]) == 0
        assert stack.health()["app"] is True
        assert create_order(app_url).status_code == 201
        assert main(["fault", "pause", "app", "--root", str(root)]) == 0
        with pytest.raises(requests.Timeout):
            requests.get(f"{direct}/healthz", timeout=0.5)
        assert main(["fault", "resume", "app", "--root", str(root)]) == 0
        assert requests.get(f"{direct}/healthz", timeout=5).status_code == 200
        capsys.readouterr()
        assert main(["fault", "list", "--root", str(root)]) == 0
        assert "no active faults" in capsys.readouterr().out
        ports = stack_ports(stack.info)
    assert wait_until_gone(root.resolve(), ports) == ([], [])


def test_toxiproxy_restart_brings_the_proxies_back_and_down_after_pause(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "h"
    stack = start_stack(small_settings(root, consumers=2))
    try:
        old = pid_of(stack, "toxiproxy")
        assert main(["fault", "restart", "toxiproxy", "--root", str(root)]) == 0
        assert "toxiproxy restarted" in capsys.readouterr().out
        assert pid_of(stack, "toxiproxy") != old
        assert create_order(stack.info.app_url).status_code == 201
        consumer = pid_of(stack, "consumer-2")
        assert main(["fault", "restart", "consumer-2", "--root", str(root)]) == 0
        assert pid_of(stack, "consumer-2") != consumer
        with pytest.raises(StackError, match="not running"):
            stack.kill("consumer-1")
            stack.pause("consumer-1")
        # down must also work while services are paused (SIGSTOP)
        stack.pause("app")
        stack.pause("redis")
        ports = stack_ports(stack.info)
    finally:
        stack.down()
    assert wait_until_gone(root.resolve(), ports) == ([], [])


def test_supervisor_killed_takes_every_service_with_it(tmp_path: Path) -> None:
    root = tmp_path / "h"
    stack = start_stack(small_settings(root, app_workers=3, consumers=1))
    ports = stack_ports(stack.info)
    supervisor = stack.info.supervisor_pid
    assert supervisor is not None
    os.kill(supervisor, signal.SIGKILL)
    processes, listening = wait_until_gone(root.resolve(), ports)
    assert processes == [] and listening == []
    assert stack._process is not None and stack._process.wait(timeout=5) == -signal.SIGKILL
    # the state file it left is stale: detected and cleaned
    assert open_stack(root) is None and not (root / "state.json").exists()
