"""Value types for the CLI's options: each turns text into a value or says, in one
line, why it cannot (argparse reports it as `argument --x: <message>`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness import bundled
from harness.durations import parse_duration
from harness.errors import HarnessError


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
