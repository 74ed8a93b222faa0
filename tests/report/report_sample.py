"""Hand-built run directories for the report tests (and the README screenshot).

The history is written with the real `HistoryWriter` and `Client`, under a fake
clock so operation times follow a scripted 60-second run: a latency fault that
causes timeouts, and a Redis outage that turns requests into 503s.

Run directly to build a sample failing run and its reports:
    .venv/bin/python tests/report/report_sample.py OUT_DIR
"""

from __future__ import annotations

import random
import shutil
import sys
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import orjson

import harness.history as history_module
from harness.catalog import PATHS
from harness.check.checker import CheckResult
from harness.check.invariants import INVARIANTS
from harness.history import Client, HistoryWriter
from harness.run.rundir import RunDir, RunSettings

SCENARIO = "mixed"
START = 1_764_493_200.0  # a fixed unix time: 2025-11-30 09:00 UTC
DURATION = 60.0
FAULTS = (
    {"name": "latency_downstream", "kind": "toxic", "target": "app", "type": "latency",
     "stream": "downstream", "attributes": {"latency": 800, "jitter": 200}, "toxicity": 1.0,
     "action": None, "start": START + 12.0, "end": START + 22.0, "error": None},
    {"name": "reset_peer", "kind": "toxic", "target": "app", "type": "reset_peer",
     "stream": "downstream", "attributes": {"timeout": 0}, "toxicity": 0.3,
     "action": None, "start": START + 18.0, "end": START + 26.0, "error": None},
    {"name": "redis_down", "kind": "proxy_down", "target": "redis", "type": None,
     "stream": None, "attributes": {}, "toxicity": 1.0, "action": None,
     "start": START + 38.0, "end": START + 43.5, "error": None},
)


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now


@contextmanager
def fake_time(clock: FakeClock) -> Iterator[None]:
    """Make `harness.history` stamp records with the scripted clock."""
    fake = types.SimpleNamespace(time=lambda: clock.now, monotonic=time.monotonic)
    with mock.patch.object(history_module, "time", fake):
        yield


def _in(windows: tuple[dict[str, Any], ...], moment: float, name: str) -> bool:
    return any(f["name"] == name and f["start"] <= moment < f["end"] for f in windows)


def write_history(histories: Path, *, rate: float = 40.0, seed: int = 7,
                  order_id: str = "ord_7f3a") -> int:
    """About `rate` operations a second for DURATION seconds, by 2 workers; returns the count."""
    rng = random.Random(seed)
    clock = FakeClock(START)
    count = 0
    with fake_time(clock):
        writers = [HistoryWriter(histories / f"w{w}-1000{w}.jsonl") for w in range(2)]
        clients = [Client(writers[u % 2], worker=f"w{u % 2}", user=u) for u in range(8)]
        moment = START
        while moment < START + DURATION:
            moment += rng.expovariate(rate)
            client = clients[rng.randrange(len(clients))]
            op = rng.choice(("create_order", "pay", "pay", "webhook", "publish"))
            clock.now = moment
            fields: dict[str, Any] = {"tenant": "default", "order_id": order_id}
            if op in ("pay", "webhook", "publish"):
                fields["provider_ref"] = f"pr_{rng.randrange(1000)}"
            if rng.random() < 0.3:
                fields["expect"] = rng.choice(("duplicate", "double_click", "producer_duplicate"))
            operation = client.invoke(op, **fields)
            latency = rng.lognormvariate(-4.0, 0.5)
            slow = _in(FAULTS, moment, "latency_downstream")
            if slow:
                latency += 0.8 + rng.random() * 0.4
            clock.now = moment + min(latency, 2.0)
            if op != "publish" and slow and latency > 1.1:
                operation.info(error="ReadTimeout: timed out after 2.0 s")
            elif op != "publish" and _in(FAULTS, moment, "reset_peer") and rng.random() < 0.3:
                operation.info(error="ConnectionResetError: [Errno 104] Connection reset by peer")
            elif _in(FAULTS, moment, "redis_down"):
                operation.info(status=None if op == "publish" else 503,
                               error="redis unavailable")
            elif rng.random() < 0.08:
                operation.fail(status=409)
            else:
                operation.ok(status=None if op == "publish" else 200,
                             replayed=fields.get("expect") == "duplicate")
            count += 1
        for writer in writers:
            writer.close()
    return count


def typed(result: dict[str, Any]) -> CheckResult:
    """A result document as the typed check result the report takes (as `harness check` reads it back)."""
    return CheckResult.from_dict(result)


def write_faults(path: Path) -> None:
    path.write_bytes(b"".join(orjson.dumps(f, option=orjson.OPT_APPEND_NEWLINE) for f in FAULTS))


def base_result(scenario: str, operations: int) -> dict[str, Any]:
    return {
        "valid": True, "run_id": f"20251130-090000-{scenario}", "scenario": scenario,
        "unsafe_disable": [],
        "invariants": [
            {"name": name, "title": title, "passed": True, "checked": 412,
             "violation_count": 0, "violations": []}
            for name, title in ((inv.name, inv.title) for inv in INVARIANTS)],
        "outcomes": {"create_order": {"ok": 410, "fail": 31, "info": 24},
                     "pay": {"ok": 800, "fail": 70, "info": 52},
                     "webhook": {"ok": 400, "fail": 30, "info": 22},
                     "publish": {"ok": 440, "fail": 0, "info": 11}},
        "jepsen": {"acknowledged": 1210, "lost": 0, "unexpected": 0, "recovered": 31,
                   "indeterminate_absent": 14},
        "layers": {"api": {"replays": 212, "fingerprint_conflicts": 14, "inflight_conflicts": 9},
                   "domain": {"already_paid": 188, "conflicts": 40, "amount_mismatches": 6},
                   "inbox": {"duplicates_skipped": 97},
                   "webhook": {"bad_signatures": 12}},
        "duplicates": {"duplicate": 320, "double_click": 140, "producer_duplicate": 97,
                       "same_fact_new_id": 45, "conflict": 40, "bad_signature": 12},
        "counts": {"operations": operations, "orders": 412, "payments": 401,
                   "faults": len(FAULTS)},
        "verdict": "pass", "inconclusive_reasons": [],
        "promised_paths": ["replay", "recovery_point"], "min_acknowledged": 1,
        "paths": {name: (0 if name == "dead_letter" else 3) for name in PATHS},
        "dead_letters": {"count": 1, "reasons": {"no message_id": 1},
                         "first": [{"kind": "dead_letter", "message_id": None, "order_id": "ord_1",
                                    "provider_ref": "pr_9", "reason": "no message_id",
                                    "deliveries": 1, "valid": False}]},
    }


def failing_result(operations: int, order_id: str = "ord_7f3a") -> dict[str, Any]:
    """The domain layer disabled: two payments on one order, via api and webhook."""
    result = base_result("mixed", operations)
    result["valid"] = False
    result["verdict"] = "fail"
    result["unsafe_disable"] = ["domain"]
    payments = [
        {"order_id": order_id, "provider_ref": "pr_api_1", "amount_cents": 1000,
         "source": "api", "source_id": "key-41", "applied_at": START + 19.2},
        {"order_id": order_id, "provider_ref": "pr_hook_2", "amount_cents": 1000,
         "source": "webhook", "source_id": "evt_88", "applied_at": START + 19.9},
    ]
    operations_evidence = [
        {"op_id": "w0-u4-p1:17", "process": "w0-u4-p1", "op": "pay", "type": "info",
         "status": None, "replayed": False, "expect": "duplicate", "idempotency_key": "key-41",
         "order_id": order_id, "provider_ref": "pr_api_1", "amount_cents": 1000,
         "invoke_time": START + 19.1, "complete_time": START + 21.1,
         "error": "ReadTimeout: timed out after 2.0 s"},
        {"op_id": "w1-u3-p0:22", "process": "w1-u3-p0", "op": "webhook", "type": "ok",
         "status": 200, "replayed": False, "expect": "same_fact_new_id", "event_id": "evt_88",
         "order_id": order_id, "provider_ref": "pr_hook_2", "amount_cents": 1000,
         "invoke_time": START + 19.8, "complete_time": START + 19.95, "error": None},
    ]
    violations = [
        {"invariant": "one_payment_per_order", "order_id": order_id,
         "message": f"order {order_id} holds 2 payments",
         "details": {"status": "PAID", "provider_refs": ["pr_api_1", "pr_hook_2"]},
         "evidence": {"payments": payments, "operations": operations_evidence,
                      "faults": [FAULTS[0], FAULTS[1]]}},
        {"invariant": "one_payment_per_order", "order_id": "ord_91bc",
         "message": "order ord_91bc holds 2 payments",
         "details": {"status": "PAID", "provider_refs": ["pr_api_1", "pr_hook_2"]},
         "evidence": {"payments": [dict(p, order_id="ord_91bc") for p in payments],
                      "operations": [], "faults": []}},
    ]
    first = result["invariants"][0]
    first.update(passed=False, violation_count=2, violations=violations)
    effects = result["invariants"][6]
    effects.update(passed=False, violation_count=1, violations=[
        {"invariant": "message_effects_once", "order_id": "ord_c001",
         "message": "message m_551 produced 2 effects",
         "details": {"message_id": "m_551", "outcomes": ["paid", "already_paid"]},
         "evidence": {"effects": [{"message_id": "m_551", "outcome": "paid"},
                                  {"message_id": "m_551", "outcome": "already_paid"}]}}])
    result["layers"]["domain"] = {"already_paid": 0, "conflicts": 0, "amount_mismatches": 0}
    return result


def build_run(run_dir: Path, *, failing: bool, order_id: str = "ord_7f3a") -> dict[str, Any]:
    """A run directory with histories, fault log and settings; returns its result dict."""
    run_dir.mkdir(parents=True, exist_ok=True)
    count = write_history(run_dir / "histories", order_id=order_id)
    write_faults(run_dir / "faults.jsonl")
    # Written by the runner's own writer, so the sample cannot drift from what runs hold.
    RunDir(run_dir).write_settings(RunSettings(run_id=f"20251130-090000-{SCENARIO}", scenario=SCENARIO,
                                               users=50, duration=DURATION, seed=7))
    return failing_result(count, order_id) if failing else base_result(SCENARIO, count)


def main(argv: list[str]) -> int:
    from harness.report.run_report import summary_line, write_reports

    out = Path(argv[1] if len(argv) > 1 else "sample-run")
    if (out / "histories").exists():
        shutil.rmtree(out / "histories")  # the writer appends; start from an empty history
    result = build_run(out, failing=True)
    paths = write_reports(RunDir(out), typed(result))
    print(summary_line(typed(result), paths.report_html))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
