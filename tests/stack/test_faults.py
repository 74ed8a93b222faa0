"""Faults by hand on one shared stack: each `harness fault` command changes what
`harness fault list` shows and what real traffic through the proxies sees."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from harness.cli.main import main
from harness.nemesis.toxiproxy_client import Nemesis
from harness.stack.local import Stack
from tests.stack.conftest import create_order


@pytest.fixture
def stack(shared_stack: Stack) -> Iterator[Stack]:
    yield shared_stack
    Nemesis(shared_stack.info.toxiproxy_url).reset()
    for name in shared_stack.health():
        if name != "toxiproxy":
            shared_stack.resume(name)


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def fault_list(root: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    code, out, _ = run_cli(["fault", "list", "--json", "--root", str(root)], capsys)
    assert code == 0
    return json.loads(out)


def timed_get(url: str) -> tuple[int, float]:
    started = time.monotonic()
    response = requests.get(url, timeout=10)
    return response.status_code, time.monotonic() - started


def test_latency_fault_is_listed_felt_and_removed(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    root = stack.root
    app_url = stack.info.app_url
    assert fault_list(root, capsys)["toxics"] == []
    code, out, _ = run_cli(["fault", "add", "latency", "--proxy", "app", "--latency", "400",
                            "--jitter", "0", "--name", "slow", "--root", str(root)], capsys)
    assert code == 0 and "slow" in out
    toxics = fault_list(root, capsys)["toxics"]
    assert [(t["name"], t["type"], t["proxy"], t["attributes"]["latency"]) for t in toxics] == \
        [("slow", "latency", "app", 400)]
    status, elapsed = timed_get(f"{app_url}/healthz")
    assert status == 200 and elapsed >= 0.4
    code, out, _ = run_cli(["status", "--json", "--root", str(root)], capsys)
    assert [f["name"] for f in json.loads(out)["faults"]] == ["slow"]
    code, out, _ = run_cli(["fault", "remove", "slow", "--root", str(root)], capsys)
    assert code == 0 and fault_list(root, capsys)["toxics"] == []
    assert requests.get(f"{app_url}/healthz", timeout=5).status_code == 200


def test_upstream_latency_on_the_redis_proxy_slows_the_app(stack: Stack,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = stack.root
    code, _, _ = run_cli(["fault", "add", "latency", "--proxy", "redis", "--stream", "upstream",
                          "--latency", "300", "--root", str(root)], capsys)
    assert code == 0
    started = time.monotonic()
    assert create_order(stack.info.app_url).status_code == 201
    assert time.monotonic() - started >= 0.3
    code, out, _ = run_cli(["fault", "clear", "--root", str(root)], capsys)
    assert code == 0 and "removed 1" in out
    assert fault_list(root, capsys)["toxics"] == []


def test_redis_proxy_down_gives_503_then_201(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    root = stack.root
    app_url = stack.info.app_url
    code, _, _ = run_cli(["fault", "down", "redis", "--root", str(root)], capsys)
    assert code == 0
    listed = fault_list(root, capsys)
    assert {p["name"]: p["enabled"] for p in listed["proxies"]} == {"app": True, "redis": False}
    statuses = [create_order(app_url).status_code for _ in range(5)]
    assert statuses == [503] * 5
    code, _, _ = run_cli(["fault", "up", "redis", "--root", str(root)], capsys)
    assert code == 0
    assert all(p["enabled"] for p in fault_list(root, capsys)["proxies"])
    assert create_order(app_url).status_code == 201


def test_app_proxy_down_refuses_clients_but_not_the_direct_url(stack: Stack,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = stack.root
    assert run_cli(["fault", "down", "app", "--root", str(root)], capsys)[0] == 0
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{stack.info.app_url}/healthz", timeout=2)
    assert requests.get(f"{stack.info.app_direct_url}/healthz", timeout=2).status_code == 200
    code, out, _ = run_cli(["status", "--root", str(root)], capsys)
    assert "proxy app down" in out
    assert run_cli(["fault", "clear", "--root", str(root)], capsys)[0] == 0
    assert requests.get(f"{stack.info.app_url}/healthz", timeout=2).status_code == 200


def test_limit_data_and_reset_peer_break_responses(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    root = stack.root
    url = f"{stack.info.app_url}/healthz"
    assert run_cli(["fault", "add", "reset_peer", "--proxy", "app", "--timeout", "0",
                    "--root", str(root)], capsys)[0] == 0
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=2)
    assert run_cli(["fault", "remove", "reset_peer_downstream", "--proxy", "app",
                    "--root", str(root)], capsys)[0] == 0
    assert requests.get(url, timeout=2).status_code == 200


def test_pause_and_resume_a_consumer_by_hand(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    root = stack.root
    assert run_cli(["fault", "pause", "consumer-1", "--root", str(root)], capsys)[0] == 0
    assert fault_list(root, capsys)["processes"] == [
        {"service": "consumer-1", "status": "paused", "healthy": False}]
    assert stack.health()["consumer-1"] is False
    assert run_cli(["fault", "resume", "consumer-1", "--root", str(root)], capsys)[0] == 0
    assert fault_list(root, capsys)["processes"] == []
    assert stack.health()["consumer-1"] is True


def test_fault_commands_work_against_any_toxiproxy(stack: Stack, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    url = stack.info.toxiproxy_url
    no_stack = str(tmp_path / "nothing-here")
    code, out, _ = run_cli(["fault", "add", "bandwidth", "--proxy", "app", "--rate", "100",
                            "--toxiproxy-url", url, "--root", no_stack], capsys)
    assert code == 0
    code, out, _ = run_cli(["fault", "list", "--toxiproxy-url", url, "--root", no_stack], capsys)
    assert "bandwidth_downstream" in out and "rate=100" in out
    assert run_cli(["fault", "clear", "--toxiproxy-url", url, "--root", no_stack], capsys)[0] == 0
    assert Nemesis(url).list_toxics() == []


@pytest.mark.parametrize("args, needle", [
    (["fault", "add", "bogus", "--proxy", "app"], "invalid choice"),
    (["fault", "add", "latency", "--proxy", "nope", "--latency", "5"], "unknown proxy"),
    (["fault", "add", "latency", "--proxy", "app", "--latency", "-5"], "must not be negative"),
    (["fault", "add", "latency", "--proxy", "app", "--rate", "5"], "no attribute --rate"),
    (["fault", "add", "latency", "--proxy", "app", "--toxicity", "1.5"], "between 0 and 1"),
    (["fault", "add", "latency", "--proxy", "app", "--stream", "sideways"], "invalid choice"),
    (["fault", "remove", "never-added"], "no toxic named"),
    (["fault", "down", "nope"], "unknown proxy"),
    (["fault", "kill", "nope"], "unknown service"),
    (["fault", "restart", "consumer-9"], "unknown service"),
    (["up", "--app-workers", "0"], "at least 1"),
    (["status", "--json", "--env"], "not allowed"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_is_one_line_and_exit_2(stack: Stack, capsys: pytest.CaptureFixture[str],
                                          args: list[str], needle: str) -> None:
    code, out, err = run_cli([*args, "--root", str(stack.root)] if args[0] == "fault" else args, capsys)
    assert code == 2
    assert err.startswith("harness: ") and err.count("\n") == 1, err
    assert needle in err
    assert fault_list(stack.root, capsys)["toxics"] == []
