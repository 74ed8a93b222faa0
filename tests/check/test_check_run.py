"""check_run on run directories written the way the load processes and the runner write them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from harness.check.checker import CheckerError, check_run
from harness.history import Client, HistoryWriter, body_digest
from harness.run.rundir import RunDir


def write_lines(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in records))


def make_run(root: Path, *, second_payment: bool = False) -> Path:
    run_dir = root / "runs" / "r-1"
    histories = run_dir / "histories"
    paid = body_digest(b'{"status":"PAID"}')
    for worker in ("w1", "w2"):
        with HistoryWriter(histories / f"{worker}.jsonl") as writer:
            client = Client(writer, worker=worker, user=1)
            create = client.invoke("create_order", tenant="default", idempotency_key=f"k-{worker}",
                                   sku="sku-1", quantity=1, amount_cents=1000)
            create.ok(status=201, order_id=f"o-{worker}", body_digest=body_digest(worker.encode()),
                      replayed=False)
            pay = client.invoke("pay", tenant="default", idempotency_key=f"p-{worker}",
                                order_id=f"o-{worker}", provider_ref=f"pr-{worker}", amount_cents=1000)
            pay.info(error="ReadTimeout")  # timed out; the retry below is answered from the store
            retry = client.invoke("pay", tenant="default", idempotency_key=f"p-{worker}",
                                  order_id=f"o-{worker}", provider_ref=f"pr-{worker}",
                                  amount_cents=1000, expect="duplicate")
            retry.ok(status=201, body_digest=paid, replayed=True)
            # a crashed process: an invoke that never completed counts as info
            client.invoke("webhook", tenant="default", order_id=f"o-{worker}",
                          provider_ref=f"pr-{worker}", event_id=f"ev-{worker}")
    export = []
    for worker in ("w1", "w2"):
        export.append({"kind": "order", "id": f"o-{worker}", "tenant": "default",
                       "idempotency_key": f"k-{worker}", "sku": "sku-1", "quantity": 1,
                       "amount_cents": 1000, "currency": "EUR", "status": "PAID", "created_at": 1.0})
        export.append({"kind": "payment", "order_id": f"o-{worker}", "provider_ref": f"pr-{worker}",
                       "amount_cents": 1000, "source": "api", "source_id": f"p-{worker}",
                       "applied_at": 2.0})
    if second_payment:
        export.append({"kind": "payment", "order_id": "o-w1", "provider_ref": "pr-w1-again",
                       "amount_cents": 1000, "source": "webhook", "source_id": "ev-x", "applied_at": 3.0})
    export.append({"kind": "inventory", "sku": "sku-1", "available": 98, "added_total": 100})
    export.append({"kind": "counters", "api_replays": 2})
    write_lines(run_dir / "export.ndjson", export)
    write_lines(run_dir / "faults.jsonl", [{"name": "cut", "kind": "proxy_down", "target": "app",
                                            "start": 0.0, "end": None, "error": None}])
    (run_dir / "settings.json").write_bytes(orjson.dumps(
        {"scenario": "mixed", "unsafe_disable": "domain, api", "users": 2}))
    return run_dir


def test_check_run_reads_a_whole_run_directory(tmp_path: Path) -> None:
    result = check_run(RunDir(make_run(tmp_path)))
    assert result.valid, result.to_dict()
    assert (result.run_id, result.scenario, result.unsafe_disable) == ("r-1", "mixed", ["domain", "api"])
    assert result.counts == {"operations": 8, "acknowledged": 4, "orders": 2, "payments": 2,
                             "faults": 1, "final_reads": 0, "dead_letters": 0}
    assert result.verdict == "pass" and result.inconclusive_reasons == []
    assert result.outcomes["webhook"] == {"ok": 0, "fail": 0, "info": 2}
    assert result.jepsen["acknowledged"] == 2 and result.jepsen["lost"] == 0
    assert result.layers["api"]["replays"] == 2


def test_check_run_collects_evidence_from_the_files(tmp_path: Path) -> None:
    result = check_run(RunDir(make_run(tmp_path, second_payment=True)))
    assert set(result.failed) == {"one_payment_per_order", "nothing_unexpected"}
    violation = result.invariant("one_payment_per_order").violations[0]
    assert violation.order_id == "o-w1"
    assert {op["op_id"].split(":")[0] for op in violation.evidence["operations"]} >= {"w1-u1-p0"}
    assert all(op["order_id"] == "o-w1" for op in violation.evidence["operations"])
    assert violation.evidence["faults"][0]["name"] == "cut"


def test_missing_export_is_a_harness_failure(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    (run_dir / "export.ndjson").unlink()
    with pytest.raises(CheckerError, match="export"):
        check_run(RunDir(run_dir))


def test_unreadable_export_is_a_harness_failure(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    with open(run_dir / "export.ndjson", "ab") as handle:
        handle.write(b'{"kind": "order", "id": \n')
    with pytest.raises(CheckerError, match="not JSON"):
        check_run(RunDir(run_dir))


def test_malformed_export_line_is_a_harness_failure(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    with open(run_dir / "export.ndjson", "ab") as handle:
        handle.write(b'{"kind": "payment", "provider_ref": "x"}\n')
    with pytest.raises(CheckerError, match="order_id"):
        check_run(RunDir(run_dir))


def test_unreadable_history_is_a_harness_failure(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    (run_dir / "histories" / "w3.jsonl").write_bytes(b'{"type": "ok", "op_id": "x:1"}\n')
    with pytest.raises(CheckerError, match="history"):
        check_run(RunDir(run_dir))


def test_settings_and_fault_log_are_optional(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path)
    (run_dir / "settings.json").unlink()
    (run_dir / "faults.jsonl").unlink()
    result = check_run(RunDir(run_dir))
    assert result.valid
    assert (result.run_id, result.scenario, result.unsafe_disable) == ("r-1", "", [])
    assert result.counts["faults"] == 0


def test_first_violation_s_counts_from_the_load_start_marker_else_settings(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, second_payment=True)
    histories = run_dir / "histories"
    first_invoke = min(r["time"] for path in histories.glob("*.jsonl")
                       for r in map(orjson.loads, path.read_bytes().splitlines()))
    (histories / ".load-started").write_text(f"{first_invoke - 2.5}\n")
    result = check_run(RunDir(run_dir))
    assert result.invariant("one_payment_per_order").first_violation_s == 2.5
    (histories / ".load-started").unlink()
    settings = orjson.loads((run_dir / "settings.json").read_bytes())
    (run_dir / "settings.json").write_bytes(orjson.dumps({**settings, "started_at": first_invoke - 4.0}))
    assert check_run(RunDir(run_dir)).invariant("one_payment_per_order").first_violation_s == 4.0
