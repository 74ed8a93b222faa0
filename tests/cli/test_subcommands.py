"""CLI commands that need no stack: `toxiproxy serve`, errors without a stack."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
import requests

from harness.cli.main import build_parser, main
from harness.ports import free_port, wait_for_port
from tests.support.cli import start_harness


def test_toxiproxy_serve_answers_the_api_until_sigterm() -> None:
    port = free_port()
    process = start_harness("toxiproxy", "serve", "--port", str(port),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        # Bounded, and generous: on a busy machine the command line's imports alone take seconds.
        assert wait_for_port("127.0.0.1", port, timeout=60), "toxiproxy serve never listened"
        assert requests.get(f"http://127.0.0.1:{port}/version", timeout=10).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert not wait_for_port("127.0.0.1", port, timeout=0.2)


@pytest.mark.parametrize("args", [
    ["fault", "list"], ["fault", "kill", "app"], ["fault", "add", "latency", "--proxy", "app"],
    ["status", "--env"],
])
def test_fault_commands_without_a_stack_say_so(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    monkeypatch.delenv("TOXIPROXY_URL", raising=False)
    assert main([*args, "--root", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness: no stack is running") and err.count("\n") == 1


def test_every_subcommand_has_a_handler() -> None:
    parser = build_parser()
    for argv in (["up"], ["down"], ["status"], ["fault", "list"], ["fault", "clear"],
                 ["fault", "add", "noop", "--proxy", "app"], ["fault", "remove", "x"],
                 ["fault", "down", "app"], ["fault", "up", "app"], ["fault", "restart", "app"],
                 ["toxiproxy", "serve"], ["run", "mixed"], ["check", "runs/x"], ["smoke"], ["matrix"],
                 ["swarm", "begin", "mixed"], ["worker", "mixed", "--master", "h"], ["completion", "bash"],
                 ["probe"]):
        assert callable(parser.parse_args(argv).handler), argv
