"""Help that states defaults and units: every option's default is shown (the subcommands
of every module included), a duration is a DURATION everywhere, and the exit codes come
from `harness.exit_codes`."""

from __future__ import annotations

import argparse
import inspect
import re
from collections.abc import Iterator

import pytest

from harness import exit_codes
from harness.cli import run_commands
from harness.cli.argtypes import duration, format_duration, positive_duration
from harness.cli.main import EXIT_CODES_HELP, HelpFormatter, Parser, build_parser, main
from harness.cli.main import main as cli_main

# Toxiproxy's toxic attributes (`fault add --timeout 500`) are whole numbers in its own units,
# as its API defines them (the help names each unit); not harness durations.
TOXIC_ATTRIBUTE_COMMAND = "harness fault add"
TIME_WORDS = ("timeout", "duration", "wait")


def parsers(parser: argparse.ArgumentParser, path: str = "harness") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from parsers(child, f"{path} {name}")


def has_visible_default(action: argparse.Action) -> bool:
    return (bool(action.option_strings) and action.nargs != 0 and action.default is not None
            and action.default is not argparse.SUPPRESS and not isinstance(action.default, bool))


def test_every_parser_is_a_parser_with_the_help_formatter() -> None:
    for path, parser in parsers(build_parser()):
        assert isinstance(parser, Parser), path
        assert parser.formatter_class is HelpFormatter, path


def test_every_option_with_a_default_shows_it() -> None:
    checked = 0
    for path, parser in parsers(build_parser()):
        formatter = HelpFormatter(prog=parser.prog)
        for action in parser._actions:
            if has_visible_default(action) and action.help is not argparse.SUPPRESS:
                text = " ".join(formatter._format_action(action).split())
                assert "default" in text.lower(), f"{path} {action.option_strings[0]}: {text}"
                checked += 1
    assert checked > 40


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args([*argv, "--help"])
    assert stopped.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_defaults_are_shown_in_their_unit(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(["run"], capsys)
    assert "--duration DURATION load duration (default 30s)" in text
    assert "--workers-wait DURATION how long the master waits for every worker to join (default 2m)" in text
    assert "--root DIR state directory of a stack started by `harness up` (default .harness)" in text
    assert "DURATION: 30s, 2m, 1m30s, 500ms or plain seconds" in text
    # A module the CLI only imports (the fault commands) gets the defaults all the same.
    assert "(default downstream)" in _help(["fault", "add"], capsys)


def test_every_time_option_is_a_duration() -> None:
    found = []
    for path, parser in parsers(build_parser()):
        if path == TOXIC_ATTRIBUTE_COMMAND:
            continue
        for action in parser._actions:
            names = " ".join(action.option_strings)
            if action.option_strings and any(word in names for word in TIME_WORDS):
                assert action.type in (duration, positive_duration), f"{path} {names} takes {action.type}"
                found.append(f"{path} {names}")
    assert {"harness up --health-timeout", "harness run --duration", "harness run --drain-timeout",
            "harness run --workers-wait", "harness probe --duration"} <= set(found)


@pytest.mark.parametrize(("argv", "seconds"), [
    (["up", "--health-timeout", "1m"], 60.0), (["up", "--health-timeout", "45"], 45.0),
    (["run", "mixed", "--duration", "1m30s"], 90.0), (["run", "mixed", "--drain-timeout", "500ms"], 0.5),
    (["smoke", "--duration", "2m"], 120.0),
])
def test_durations_accept_units(argv: list[str], seconds: float) -> None:
    args = build_parser().parse_args(argv)
    assert getattr(args, argv[-2].lstrip("-").replace("-", "_")) == seconds


@pytest.mark.parametrize(("seconds", "text"), [(0.5, "500ms"), (30, "30s"), (120, "2m"), (90, "1m30s"), (0, "0s")])
def test_format_duration_reads_back(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text and duration(text) == seconds


def test_exit_codes_come_from_one_module() -> None:
    for name in ("EXIT_OK", "EXIT_VIOLATION", "EXIT_HARNESS", "EXIT_INCONCLUSIVE"):
        assert f"{getattr(exit_codes, name)} " in EXIT_CODES_HELP
    for module in (cli_main, run_commands):
        # No copy of an exit code (or of the stack root) defined in the CLI's own modules.
        assert not re.search(r"^(EXIT_\w+|DEFAULT_ROOT)\b.*=", inspect.getsource(module), re.MULTILINE)


def test_main_returns_the_harness_exit_code_for_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run"]) == exit_codes.EXIT_HARNESS
    assert capsys.readouterr().err == "harness: run: the following arguments are required: SCENARIO\n"
