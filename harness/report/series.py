"""Per-second series of a run, built by streaming its history once.

Memory grows with the run's length in seconds, never with its operation count:
each one-second bucket keeps counters and a sparse latency histogram with
logarithmic bins (5 % wide), from which p50 and p99 are read. A run too long to
draw second by second is merged into wider buckets at read time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Latency bins are powers of 1.05 in milliseconds: ±2.5 % error on a percentile.
_BIN_BASE = math.log(1.05)
_MIN_LATENCY_MS = 0.1


def latency_bin(latency_ms: float) -> int:
    return int(math.floor(math.log(max(latency_ms, _MIN_LATENCY_MS)) / _BIN_BASE))


def bin_value(index: int) -> float:
    """The geometric middle of a bin, in milliseconds."""
    return math.exp((index + 0.5) * _BIN_BASE)


def percentile(histogram: Mapping[int, int], fraction: float) -> float | None:
    total = sum(histogram.values())
    if total == 0:
        return None
    rank = max(1, math.ceil(total * fraction))
    seen = 0
    for index in sorted(histogram):
        seen += histogram[index]
        if seen >= rank:
            return bin_value(index)
    return bin_value(max(histogram))


@dataclass
class Bucket:
    ok: dict[str, int] = field(default_factory=dict)
    completed: int = 0
    fail: int = 0
    info: int = 0
    latency: dict[int, int] = field(default_factory=dict)

    def merge(self, other: Bucket) -> None:
        for op, count in other.ok.items():
            self.ok[op] = self.ok.get(op, 0) + count
        self.completed += other.completed
        self.fail += other.fail
        self.info += other.info
        for index, count in other.latency.items():
            self.latency[index] = self.latency.get(index, 0) + count


@dataclass
class OpStats:
    ok: int = 0
    fail: int = 0
    info: int = 0
    latency: dict[int, int] = field(default_factory=dict)


@dataclass
class RunSeries:
    """Buckets keyed by absolute unix second, plus per-operation totals."""

    buckets: dict[int, Bucket] = field(default_factory=dict)
    ops: dict[str, OpStats] = field(default_factory=dict)
    first_time: float | None = None
    last_time: float | None = None
    operations: int = 0

    def add(self, operation: Mapping[str, Any]) -> None:
        invoked = _number(operation.get("invoke_time"))
        completed = _number(operation.get("complete_time"))
        if completed is None:
            completed = invoked
        if completed is None:
            return
        if invoked is None:
            invoked = completed
        op = str(operation.get("op") or "unknown")
        kind = operation.get("type")
        self.operations += 1
        self._see(invoked)
        self._see(completed)
        bucket = self.buckets.setdefault(int(math.floor(completed)), Bucket())
        bucket.completed += 1
        stats = self.ops.setdefault(op, OpStats())
        if kind == "ok":
            stats.ok += 1
            bucket.ok[op] = bucket.ok.get(op, 0) + 1
        elif kind == "fail":
            stats.fail += 1
            bucket.fail += 1
        else:
            stats.info += 1
            bucket.info += 1
        index = latency_bin((completed - invoked) * 1000.0)
        bucket.latency[index] = bucket.latency.get(index, 0) + 1
        stats.latency[index] = stats.latency.get(index, 0) + 1

    def _see(self, moment: float) -> None:
        if self.first_time is None or moment < self.first_time:
            self.first_time = moment
        if self.last_time is None or moment > self.last_time:
            self.last_time = moment

    def op_names(self) -> list[str]:
        return sorted(self.ops, key=_op_order)

    def resampled(
        self, start: int, end: float, max_points: int = 600
    ) -> list[tuple[float, float, Bucket]]:
        """(x seconds since `start`, bucket width, merged bucket) covering start..end.

        Seconds with no completions come out as empty buckets, so rates drop to zero
        during an outage instead of the line bridging it.
        """
        seconds = max(int(math.ceil(end - start)), 1)
        width = max(1, math.ceil(seconds / max_points))
        count = math.ceil(seconds / width)
        merged = [Bucket() for _ in range(count)]
        for second, bucket in self.buckets.items():
            index = (second - start) // width
            if 0 <= index < count:
                merged[index].merge(bucket)
        rows = [(index * width + width / 2, float(width), merged[index]) for index in range(count)]
        # A last bucket that the run only half filled would draw a false drop to zero.
        if len(rows) > 1 and (end - start) - (count - 1) * width < width / 2:
            rows.pop()
        return rows


def build_series(operations: Iterable[Mapping[str, Any]]) -> RunSeries:
    series = RunSeries()
    for operation in operations:
        series.add(operation)
    return series


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if math.isnan(value) or math.isinf(value):
        return None
    return float(value)


_KNOWN_OPS = ("create_order", "pay", "webhook", "publish")


def _op_order(name: str) -> tuple[int, str]:
    return (_KNOWN_OPS.index(name) if name in _KNOWN_OPS else len(_KNOWN_OPS), name)
