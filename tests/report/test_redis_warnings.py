"""The report's warnings about the stack's Redis (harness.report.run_facts): any
eviction policy but noeviction, and keys evicted during the run, make idempotency
records disposable; the report says so above the invariants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from html_probe import Probe
from report_sample import START, typed

from harness.report.run_facts import RedisCapture, RedisSettings, redis_warnings
from harness.report.run_report import write_reports
from harness.run.rundir import RunDir


def _reading(policy: str = "noeviction", evicted: int = 0, **fields: Any) -> RedisSettings:
    return RedisSettings(at=START, maxmemory=fields.pop("maxmemory", 0), maxmemory_policy=policy,
                         appendonly=fields.pop("appendonly", True), save=fields.pop("save", ""),
                         evicted_keys=evicted, **fields)


def test_noeviction_without_evictions_warns_nothing() -> None:
    assert redis_warnings(RedisCapture(before=_reading(), after=_reading())) == []


def test_every_eviction_policy_but_noeviction_warns() -> None:
    for policy in ("allkeys-lru", "volatile-lru", "allkeys-random", "volatile-ttl", "allkeys-lfu"):
        (warning,) = redis_warnings(RedisCapture(before=_reading(policy), after=_reading(policy)))
        assert policy in warning and "evict" in warning


def test_keys_evicted_during_the_run_warn_even_under_noeviction_at_the_end() -> None:
    # The policy was changed back before the end: the eviction counter still tells.
    capture = RedisCapture(before=_reading("allkeys-lru", evicted=5), after=_reading("noeviction", evicted=17))
    warnings = redis_warnings(capture)
    assert len(warnings) == 2 and "allkeys-lru" in warnings[0] and "evicted 12 key(s)" in warnings[1]
    # A restarted Redis counts from zero: what it evicted since the restart.
    assert RedisCapture(before=_reading(evicted=40), after=_reading(evicted=3)).evicted_during_run == 3
    assert RedisCapture(before=_reading(evicted=4)).evicted_during_run is None


def test_the_report_shows_the_warning_and_the_settings(failing_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, result = failing_run
    lru = _reading("allkeys-lru", maxmemory=3 * 1024 * 1024)
    RunDir(run_dir).write_redis_capture(RedisCapture(before=lru, after=_reading("allkeys-lru", evicted=9,
                                                                                maxmemory=3 * 1024 * 1024)))
    document = write_reports(RunDir(run_dir), typed(result)).report_html.read_text()
    probe = Probe(document)
    assert probe.find("section", id="warnings")
    assert len(probe.find("p", **{"class": "warning"})) == 2
    assert "maxmemory-policy is allkeys-lru with maxmemory 3145728 bytes" in probe.all_text
    assert "Redis evicted 9 key(s) during the run" in probe.all_text
    # Above the invariants, so nobody reads the failures first.
    assert document.index("id='warnings'") < document.index("<h2 style='margin-top:0'>Invariants")
    assert probe.find("tr", data_setting="maxmemory_policy")


def test_a_run_without_warnings_or_readings_says_so(passing_run: tuple[Path, dict[str, Any]]) -> None:
    run_dir, result = passing_run
    document = write_reports(RunDir(run_dir), typed(result)).report_html.read_text()
    assert "id='warnings'" not in document and "not recorded for this run" in document
    RunDir(run_dir).write_redis_capture(RedisCapture(before=_reading(), after=RedisSettings(
        at=START, error="ConnectionError: refused")))
    document = write_reports(RunDir(run_dir), typed(result)).report_html.read_text()
    assert "id='warnings'" not in document and "unreadable: ConnectionError: refused" in document
