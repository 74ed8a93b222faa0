"""Value types for the CLI's options: each turns text into a value or says, in one
line, why it cannot (argparse reports it as `argument --x: <message>`). Also the
options several commands share, defined once (`add_root_option`).

One unit per kind of value: every duration is a `duration` (`30s`, `2m`, `1m30s`,
`500ms` or plain seconds), shown as DURATION in the help; a fault plan is a bundled
name or a YAML file, parsed here so a bad plan stops the command before it starts
anything.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypeAlias

from harness import bundled
from harness.durations import parse_duration
from harness.errors import HarnessError
from harness.load.settings import parse_think_time
from harness.names import DEFAULT_STACK_ROOT

# What every `add_*` function of the CLI receives: the action its subcommand joins.
# (A string: argparse's class is generic only in its type stubs.)
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _one_line(error: Exception) -> str:
    # A YAML parser's message spans lines; a usage error is one line.
    return " ".join(str(error).split())


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def positive_int(text: str) -> int:
    value = _whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = _whole_number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def think_time(text: str) -> tuple[float, float]:
    """(low, high) seconds from `LOW-HIGH` (`0.1-0.2`, `100ms-200ms`) or one duration."""
    try:
        return parse_think_time(text)
    except HarnessError as error:
        raise argparse.ArgumentTypeError(_one_line(error).removeprefix("--harness-think-time: ")) from None


def duration(text: str) -> float:
    """Seconds, from `30s`, `2m`, `1m30s`, `500ms` or a plain number."""
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(_one_line(error)) from error


def positive_duration(text: str) -> float:
    """A `duration` longer than zero (a load that lasts no time proves nothing)."""
    seconds = duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be longer than zero, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest of `500ms`, `30s`, `2m`, `1m30s` for `seconds` (the help shows defaults so)."""
    if seconds < 1 and seconds != 0:
        return f"{seconds * 1000:g}ms"
    minutes, rest = divmod(seconds, 60)
    if minutes and rest:
        return f"{minutes:g}m{rest:g}s"
    return f"{minutes:g}m" if minutes else f"{rest:g}s"


def plan(text: str) -> Path:
    """A bundled plan's name (`chaos`) or the path of a plan YAML file, found and parsed
    before anything starts: an unknown name, a missing file or a plan that does not
    parse is a usage error."""
    # Imported here: only the commands that take a plan pay for the plan parser (and
    # the nemesis it imports); `harness down` or `status` never do.
    from harness.nemesis.plans import load_plan

    try:
        path = bundled.plan_path(text)
        load_plan(path)
    except HarnessError as error:
        raise argparse.ArgumentTypeError(_one_line(error)) from None
    return path


def add_root_option(parser: argparse.ArgumentParser, *, help: str = "state directory of the stack") -> None:
    """`--root DIR`: where a local stack keeps its state; every command that finds a stack takes it."""
    parser.add_argument("--root", type=Path, default=DEFAULT_STACK_ROOT, metavar="DIR", help=help)
