"""Reading a document a user hands the harness (YAML or JSON) without crashing on it.

The probe config, the fault plans, a compose file, a stack's state.json and the
probe's `--body` come through here. Whatever a file holds, the caller gets the parsed value or its own
`HarnessError` subclass (`error=`) with one line naming the file, which the CLI
prints before exiting 2. These are refused:
- a file that cannot be read (missing, a directory, no permission);
- bytes that are not UTF-8;
- text that is not YAML (or JSON): the parser's problem, with its line and column;
- a value the parser cannot build: an integer of more than 4,300 digits (Python's
  limit on int(str)), a date such as 2024-13-45;
- nesting deeper than MAX_DEPTH. YAML's composer recurses once per level, so
  5,000 nested `[` end in RecursionError inside PyYAML: `load_yaml` counts the
  depth while it composes and stops at MAX_DEPTH, long before the interpreter's
  limit, with the line of the offending node. JSON's decoder recurses too; its
  RecursionError is caught;
- an integer beyond a float's range (float() of it is an OverflowError, and each
  number of these files becomes a float somewhere: a duration, a probability);
- a value built with aliases that contains itself (`a: &x [*x]`), goes deeper than
  MAX_DEPTH once its aliases are expanded, or expands into more than MAX_VALUES
  values (the "billion laughs"): the harness's own walkers (body templates, the
  error messages that quote a value) would recurse forever or for hours.

MAX_DEPTH is far above what any file of the harness needs (a dozen levels) and far
below where one of its recursive walkers would meet the interpreter's limit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from harness.errors import HarnessError

MAX_DEPTH = 100
MAX_VALUES = 1_000_000
MAX_NUMBER = int(sys.float_info.max)


class _TooDeep(Exception):
    """Raised inside the composer; `load_yaml` turns it into the caller's error."""

    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


class _BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses to compose a node deeper than MAX_DEPTH."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                event: Any = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's stubs leave it untyped
                raise _TooDeep(event.start_mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def read_text(path: Path, *, error: type[HarnessError], what: str) -> str:
    """The file's text; `error` when it cannot be read or is not UTF-8."""
    try:
        data = Path(path).read_bytes()
    except OSError as failure:
        raise error(f"{path}: cannot read {what}: {failure.strerror or failure}") from None
    return decode(data, source=str(path), error=error)


def decode(data: bytes, *, source: str, error: type[HarnessError]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as failure:
        raise error(f"{source}: not UTF-8 text (byte {failure.start} is {data[failure.start]:#04x})") from None


def load_yaml(path: Path, *, error: type[HarnessError], what: str) -> Any:
    """The YAML document of a file, checked as the module docstring says."""
    return parse_yaml(read_text(path, error=error, what=what), source=str(path), error=error)


def parse_yaml(text: str, *, source: str, error: type[HarnessError]) -> Any:
    try:
        # The reader checks every character as the loader is made (a NUL is a ReaderError).
        loader = _BoundedLoader(text)
        try:
            value = loader.get_single_data()
        finally:
            loader.dispose()
    except _TooDeep as deep:
        raise error(f"{source}: nested deeper than {MAX_DEPTH} levels (line {deep.line})") from None
    except yaml.MarkedYAMLError as failure:
        raise error(f"{source}: not valid YAML: {_yaml_problem(failure)}") from None
    except yaml.YAMLError as failure:
        raise error(f"{source}: not valid YAML: {_first_line(failure)}") from None
    except (ValueError, OverflowError, RecursionError) as failure:
        # A scalar the constructor cannot turn into a value (int of 5,000 digits, a bad date).
        raise error(f"{source}: a value cannot be read: {_first_line(failure).split(';')[0]}") from None
    check_shape(value, source=source, error=error)
    return value


def parse_json(data: str | bytes, *, source: str, error: type[HarnessError]) -> Any:
    """A JSON document, checked as the module docstring says."""
    text = decode(data, source=source, error=error) if isinstance(data, bytes) else data
    try:
        value = json.loads(text)
    except RecursionError:
        raise error(f"{source}: nested too deep to read") from None
    except ValueError as failure:  # JSONDecodeError, and int() refusing 5,000 digits
        raise error(f"{source}: not JSON ({_first_line(failure).split(';')[0]})") from None
    check_shape(value, source=source, error=error)
    return value


def check_shape(value: Any, *, source: str, error: type[HarnessError]) -> None:
    """`error` when `value` contains itself, nests deeper than MAX_DEPTH or expands
    into more than MAX_VALUES values. Iterative, and each distinct container is
    measured once, so a document of shared aliases costs its size as written."""
    if not isinstance(value, (dict, list)):
        _check_number(value, source=source, error=error)
        return
    # Per container (by id; every one stays alive inside `value`): its height (levels
    # of containers, itself included) and its size (values, aliases expanded).
    measured: dict[int, tuple[int, int]] = {}
    open_ids: set[int] = set()  # the containers on the path from the root: a cycle
    # Frames of the walk: the container, its children still to visit, height, size.
    frames: list[tuple[Any, list[Any], list[int]]] = []

    def enter(container: Any) -> None:
        children = list(container.values()) if isinstance(container, dict) else list(container)
        children.reverse()
        open_ids.add(id(container))
        frames.append((container, children, [1, 1]))

    enter(value)
    while frames:
        container, children, totals = frames[-1]
        while children:
            child = children.pop()
            if not isinstance(child, (dict, list)):
                _check_number(child, source=source, error=error)
                totals[1] += 1
                continue
            known = measured.get(id(child))
            if known is None:
                if id(child) in open_ids:
                    raise error(f"{source}: a value contains itself (an alias inside its own anchor)")
                if len(frames) >= MAX_DEPTH:
                    raise error(f"{source}: nested deeper than {MAX_DEPTH} levels")
                enter(child)
                break
            totals[0] = max(totals[0], known[0] + 1)
            totals[1] += known[1]
        else:
            frames.pop()
            open_ids.discard(id(container))
            height, size = totals
            if height > MAX_DEPTH:
                raise error(f"{source}: nested deeper than {MAX_DEPTH} levels once its aliases are expanded")
            if size > MAX_VALUES:
                raise error(f"{source}: more than {MAX_VALUES:,} values once its aliases are expanded")
            measured[id(container)] = (height, size)
            if frames:
                parent = frames[-1][2]
                parent[0] = max(parent[0], height + 1)
                parent[1] += size


def _check_number(value: Any, *, source: str, error: type[HarnessError]) -> None:
    # Every number of these files ends up a float somewhere (a duration, a probability,
    # a fraction), and float() of an int beyond a float's range is an OverflowError.
    if type(value) is int and not -MAX_NUMBER <= value <= MAX_NUMBER:
        raise error(f"{source}: a number of {len(str(abs(value)))} digits is beyond any value the harness reads")


def _yaml_problem(failure: yaml.MarkedYAMLError) -> str:
    mark = failure.problem_mark or failure.context_mark
    problem = failure.problem or failure.context or _first_line(failure)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem


def _first_line(failure: BaseException) -> str:
    return (str(failure).strip().splitlines() or [type(failure).__name__])[0]
