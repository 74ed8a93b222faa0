"""CLI commands that need no stack: `toxiproxy serve`, errors without a stack; each
command's parser built alone (what `main` does) is the whole parser's."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from harness.cli.main import COMMAND_ADDERS, build_parser, command_adder, main
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


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_each_command_alone_parses_as_in_the_whole_parser() -> None:
    # main builds only the parser of the command it runs (COMMAND_ADDERS): the table names
    # every command of the whole parser, and each one built alone has the same help, so
    # the same options, defaults and choices.
    whole = _commands(build_parser())
    assert set(COMMAND_ADDERS) == set(whole)
    for command, parser in whole.items():
        adder = command_adder([command, "--help"])
        assert adder is not None, command
        alone = _commands(build_parser([adder]))
        assert alone[command].format_help() == parser.format_help(), command
    assert command_adder([]) is None and command_adder(["--version"]) is None and command_adder(["rnu"]) is None


def test_a_command_line_builds_only_its_commands_module() -> None:
    # In a fresh interpreter: `down` leaves the probe and the run's modules unimported,
    # `run` imports the run's but not the probe's. Each is one Python start (~0.3 s of CPU).
    program = ("import sys; from harness.cli.main import main\n"
               "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
               "print(' '.join(m for m in ('harness.cli.probe_commands', 'harness.cli.run_commands',"
               " 'harness.probe.runner', 'harness.run.runner') if m in sys.modules))")
    down = subprocess.run([sys.executable, "-c", program, "down", "--root", "/nonexistent/harness-root"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert down.returncode == 0 and down.stdout.splitlines()[-1] == "", down.stdout + down.stderr
    run_help = subprocess.run([sys.executable, "-c", program, "run", "--help"],
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert run_help.stdout.splitlines()[-1] == "harness.cli.run_commands harness.run.runner", run_help.stdout
