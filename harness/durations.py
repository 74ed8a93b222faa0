"""Durations as people write them: `30s`, `2m`, `1m30s`, `500ms`, or plain seconds."""

from __future__ import annotations

import re
import sys

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | int | float) -> float:
    """Seconds in `text`; ValueError with the text when it is not a duration ≥ 0."""
    if isinstance(text, bool):
        raise ValueError(f"not a duration: {text!r}")
    if isinstance(text, int) and abs(text) > sys.float_info.max:  # float() of it is an OverflowError
        raise ValueError(f"not a duration: an integer of {len(str(abs(text)))} digits (must be a finite number of seconds ≥ 0)")
    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        cleaned = str(text).strip().lower()
        try:
            seconds = float(cleaned)
        except ValueError:
            parts = _PART.findall(cleaned)
            if not parts or "".join(number + unit for number, unit in parts) != cleaned:
                raise ValueError(f"not a duration: {text!r} (write e.g. 30s, 2m, 1m30s, 500ms)") from None
            seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
    if seconds < 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"not a duration: {text!r} (must be a finite number of seconds ≥ 0)")
    return seconds
