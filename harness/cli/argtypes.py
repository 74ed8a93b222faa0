"""Value types for the CLI's options: each turns text into a value or says, in one
line, why it cannot (argparse reports it as `argument --x: <message>`). Also the
options several commands share, defined once (`add_root_option`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness import bundled
from harness.durations import parse_duration
from harness.errors import HarnessError
from harness.names import DEFAULT_STACK_ROOT


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


def duration(text: str) -> float:
    """Seconds, from `30s`, `2m`, `1m30s`, `500ms` or a plain number."""
    try:
        return parse_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def plan(text: str) -> Path:
    """A bundled plan's name (`chaos`) or the path of a plan YAML file, found before anything starts."""
    try:
        return bundled.plan_path(text)
    except HarnessError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_root_option(parser: argparse.ArgumentParser, *, help: str = "state directory of the stack") -> None:
    """`--root DIR`: where a local stack keeps its state; every command that finds a stack takes it."""
    parser.add_argument("--root", type=Path, default=DEFAULT_STACK_ROOT, metavar="DIR",
                        help=f"{help} (default %(default)s)")
