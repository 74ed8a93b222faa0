"""Field checks for parsed YAML: each failure is an error naming the source and the field.

`FieldChecker(source, error_type)` checks one value at a time; every check returns the
value when it is usable and otherwise raises `error_type("<source>: <path>: <message>")`,
e.g. `plan.yaml: windows[0].for: ...`. The error class is a parameter so that each
file format keeps its own exception (a fault plan raises PlanError, a probe config
ProbeConfigError) while the checks and their wording are written once. A format adds
its own checks by subclassing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.durations import parse_duration
from harness.errors import HarnessError


def printable(value: Any) -> str:
    """A key or name of a file as a message shows it: as written when it is printable
    text, else its repr (a control character or a line break is escaped, not printed)."""
    text = str(value)
    return text if text.isprintable() else repr(text)


class FieldChecker:
    """Checks that raise `error_type` with the source and the field's path."""

    def __init__(self, source: str, error_type: type[HarnessError]) -> None:
        self.source = source
        self.error_type = error_type

    def error(self, path: str, message: str) -> HarnessError:
        """The error to raise for the field at `path` (returned, so callers `raise` it).

        One line, whatever the file held: a line break inside a quoted value (a key
        or a string of the file) is shown as `\\n`, since the CLI prints a message's
        further lines as a log's tail."""
        lines = message.splitlines()
        one_line = "\\n".join(lines) if len(lines) > 1 else message
        return self.error_type(f"{self.source}: {path}: {one_line}")

    def mapping(self, raw: Any, path: str, *, required: Sequence[str] = (),
                optional: Sequence[str] = ()) -> dict[str, Any]:
        """`raw` as a mapping with every required key and no key outside the two lists."""
        if not isinstance(raw, dict):
            raise self.error(path, "must be a mapping")
        unknown = sorted(printable(key) for key in raw if key not in required and key not in optional)
        if unknown:
            allowed = ", ".join([*required, *optional])
            raise self.error(path, f"unknown key(s) {', '.join(unknown)} (allowed: {allowed})")
        missing = [key for key in required if key not in raw]
        if missing:
            raise self.error(path, f"missing {', '.join(missing)}")
        return raw

    def integer(self, raw: Any, path: str, *, minimum: int = 0, wording: str | None = None) -> int:
        """An int (not a bool) >= `minimum`; `wording` replaces "an integer >= N" in the error."""
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
            raise self.error(path, f"must be {wording or f'an integer >= {minimum}'}, not {raw!r}")
        return raw

    def duration(self, raw: Any, path: str) -> float:
        """Seconds from a duration such as `2s`, `500ms` or a number (harness.durations)."""
        try:
            return parse_duration(raw)
        except (ValueError, TypeError) as error:
            raise self.error(path, str(error)) from None
