"""Redis replies as typed values: the one place that turns redis-py's loosely typed
answers into the shapes the app works with.

redis-py types a reply as whatever any connection mode could give (bytes or text,
possibly None); the app's clients decode to text, so these functions check that and
convert, and a reply of another shape is a `TypeError` here rather than a confusing
failure later.
"""

from __future__ import annotations

from collections.abc import Iterable

StreamEntry = tuple[str, dict[str, str]]


def text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    raise TypeError(f"expected text from Redis, got {type(value).__name__}")


def texts(values: Iterable[object]) -> list[str]:
    return [text(value) for value in values]


def stream_entries(reply: object) -> list[StreamEntry]:
    """XRANGE's and XAUTOCLAIM's entry list: [(entry_id, {field: value}), ...]."""
    if reply is None:
        return []
    if not isinstance(reply, list):
        raise TypeError(f"expected a list of stream entries, got {type(reply).__name__}")
    entries: list[StreamEntry] = []
    for entry_id, fields in reply:
        # A deleted entry that is still pending comes back with no fields.
        pairs = fields.items() if isinstance(fields, dict) else ()
        entries.append((text(entry_id), {text(name): text(value) for name, value in pairs}))
    return entries


def read_group_entries(reply: object) -> list[StreamEntry]:
    """XREADGROUP's reply flattened: every stream's entries in order (None when it timed out)."""
    if reply is None:
        return []
    if not isinstance(reply, list):
        raise TypeError(f"expected XREADGROUP's list of streams, got {type(reply).__name__}")
    return [entry for _stream, entries in reply for entry in stream_entries(entries)]
