"""Per-second series: bounded by run seconds, percentiles from log bins."""

from __future__ import annotations

from harness.report.series import build_series, percentile

T0 = 1_700_000_000.0


def op(invoke: float, latency: float, kind: str = "ok", name: str = "pay") -> dict:
    return {"op": name, "type": kind, "invoke_time": invoke, "complete_time": invoke + latency}


def test_buckets_grow_with_seconds_not_operations() -> None:
    operations = (op(T0 + (i % 5) + 0.5, 0.01) for i in range(20_000))
    series = build_series(operations)
    assert series.operations == 20_000
    assert len(series.buckets) == 5
    assert sum(b.completed for b in series.buckets.values()) == 20_000


def test_percentiles_within_bin_error() -> None:
    latencies = [0.001 * (i + 1) for i in range(1000)]  # 1..1000 ms
    series = build_series(op(T0, latency) for latency in latencies)
    stats = series.ops["pay"]
    p50, p99 = percentile(stats.latency, 0.5), percentile(stats.latency, 0.99)
    assert p50 is not None and abs(p50 - 500) / 500 < 0.05
    assert p99 is not None and abs(p99 - 990) / 990 < 0.05
    assert percentile({}, 0.5) is None


def test_outcomes_and_errors_are_counted() -> None:
    series = build_series([op(T0, 0.1), op(T0, 0.1, "fail"), op(T0 + 1, 2.0, "info", "webhook")])
    assert (series.ops["pay"].ok, series.ops["pay"].fail) == (1, 1)
    assert series.ops["webhook"].info == 1
    rows = series.resampled(int(T0), T0 + 4)
    assert [b.fail for _, _, b in rows] == [1, 0, 0, 0]
    assert [b.info for _, _, b in rows] == [0, 0, 0, 1]  # counted at completion (T0+3)
    assert [b.ok for _, _, b in rows] == [{"pay": 1}, {}, {}, {}]  # throughput counts ok only


def test_long_or_stray_times_are_merged_into_few_points() -> None:
    series = build_series([op(T0, 0.1), op(T0 + 3600 * 24 * 365, 0.1), op(0.0, 0.1)])
    rows = series.resampled(0, T0 + 3600 * 24 * 365 + 1, max_points=300)
    assert len(rows) <= 300
    assert sum(b.completed for _, _, b in rows) == 3


def test_missing_or_bad_times_are_ignored() -> None:
    series = build_series([{"op": "pay", "type": "ok"},
                           {"op": "pay", "type": "ok", "invoke_time": "x", "complete_time": None}])
    assert series.operations == 0 and not series.buckets
