"""The operation log: one invoke and exactly one completion per operation, the
process renamed after an `info` or an abandoned operation, batched writing, and what
records say about requests and answers."""

import threading
from pathlib import Path

import pytest

from harness.check.checker import check
from harness.history import (
    ORDER_ANSWER_FIELDS,
    PAYMENT_ANSWER_FIELDS,
    REJECT_STATUS,
    Client,
    Completion,
    HistoryError,
    HistoryFiles,
    HistoryWriter,
    Invoke,
    SharedHistory,
    answer_summary,
    history_files,
    iter_operations,
    merge_operation,
    merge_records,
    problem_type,
    read_pairs,
    read_records,
)


def test_each_invoke_pairs_with_its_completion(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "w1.jsonl") as writer:
        client = Client(writer, worker="w1", user=0)
        op = client.invoke("create_order", idempotency_key="k1", tenant="default")
        op.ok(status=201, order_id="ord_1")
        op = client.invoke("pay", idempotency_key="k2", order_id="ord_1", provider_ref="pr")
        op.fail(status=409)
    operations = list(iter_operations(history_files(tmp_path)))
    assert [(o["op"], o["type"]) for o in operations] == [("create_order", "ok"), ("pay", "fail")]
    assert operations[0]["order_id"] == "ord_1"
    assert operations[0]["idempotency_key"] == "k1"
    assert operations[1]["provider_ref"] == "pr"
    assert operations[0]["invoke_time"] <= operations[0]["complete_time"]


def test_info_makes_the_client_a_new_process(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "w1.jsonl") as writer:
        client = Client(writer, worker="w1", user=3)
        first = client.process
        client.invoke("pay", order_id="o").info(error="timeout")
        second = client.process
        client.invoke("pay", order_id="o").ok(status=200)
    assert first == "w1-u3-p0" and second == "w1-u3-p1"
    processes = [o["process"] for o in iter_operations(history_files(tmp_path))]
    assert processes == ["w1-u3-p0", "w1-u3-p1"]


def test_a_process_has_one_operation_outstanding(tmp_path: Path) -> None:
    client = Client(None, worker="w", user=0)
    client.invoke("pay")
    with pytest.raises(HistoryError):
        client.invoke("pay")


def test_an_operation_completes_once(tmp_path: Path) -> None:
    op = Client(None, worker="w", user=0).invoke("publish")
    op.ok()
    with pytest.raises(HistoryError):
        op.fail()


def test_invoke_without_completion_reads_as_info(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path / "w.jsonl")
    Client(writer, worker="w", user=0).invoke("webhook", event_id="e1")
    writer.close()
    (operation,) = iter_operations(history_files(tmp_path))
    assert operation["type"] == "info" and operation["event_id"] == "e1"


def test_nothing_is_lost_at_close_and_batches_are_written_early(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    writer = HistoryWriter(path, flush_every=10, flush_interval=3600)
    client = Client(writer, worker="w", user=0)
    for _ in range(12):
        client.invoke("publish", message_id="m").ok()
    assert len(path.read_bytes().splitlines()) == 20  # two batches of ten, four buffered
    writer.close()
    assert len(path.read_bytes().splitlines()) == 24


# --- the one reader, and its rule for a torn last line (docs/checker.md) -------------

def _two_operations(path: Path) -> None:
    with HistoryWriter(path) as writer:
        client = Client(writer, worker="w", user=0)
        client.invoke("publish", message_id="m1").ok()
        client.invoke("pay", order_id="o1", provider_ref="pr1").ok(status=201, order_id=None)


def test_a_torn_invoke_is_an_operation_that_never_started(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    _two_operations(path)
    with open(path, "ab") as handle:
        handle.write(b'{"type": "inv')
    assert [o["type"] for o in iter_operations([path])] == ["ok", "ok"]
    assert len(list(read_pairs([path]))) == 2


def test_a_torn_completion_leaves_its_operation_info(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    _two_operations(path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]) + lines[-1][:25])  # the pay's ok, cut in the middle
    first, second = iter_operations([path])
    assert (first["message_id"], first["type"]) == ("m1", "ok")
    assert (second["order_id"], second["type"], second["error"]) == ("o1", "info", "no completion recorded")
    assert second["complete_time"] == second["invoke_time"]
    # the checker reads the same thing: an info attempt, so a missing payment is no violation
    result = check(HistoryFiles([path]), [{"kind": "order", "id": "o1", "status": "CREATED"},
                                          {"kind": "message_effect", "message_id": "m1", "outcome": "invalid"}])
    assert result.outcomes["pay"] == {"ok": 0, "fail": 0, "info": 1}
    assert result.invariant("no_lost_acknowledgement").passed


def test_a_last_line_without_its_newline_that_parses_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    _two_operations(path)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    assert [o["type"] for o in iter_operations([path])] == ["ok", "ok"]


@pytest.mark.parametrize(("content", "match"), [
    (b'{"type": "inv\n{"type": "ok", "op_id": "x"}\n', "not a JSON record"),  # torn, then more
    (b'[1, 2]\n', "not a JSON object"),
    (b'"text"', "not a JSON object"),
])
def test_anything_else_unreadable_is_an_error(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "w.jsonl"
    path.write_bytes(content)
    with pytest.raises(HistoryError, match=match):
        list(iter_operations([path]))


@pytest.mark.parametrize(("content", "match"), [
    (b'{"type": "inv\n{"type": "ok", "op_id": "x"}\n', "w.jsonl:1: not a JSON record"),
    (b'[1, 2]\n', r"w.jsonl:1: not a history record: Expected `object`, got `array`"),
    (b'"text"', r"w.jsonl:1: not a history record: Expected `object`, got `str`"),
    (b'{"type": "invoke", "op_id": "x", "op": "pay"}\n{"type": "ok", "op_id": "x", "answer": "yes"}\n',
     r"w.jsonl:2: not a history record: .*\$\.answer"),
    (b'{"type": "done", "op_id": "x"}\n', r"w.jsonl:1: not a history record: Invalid value 'done' - at `\$\.type`"),
    (b'{"op_id": "x"}\n', "w.jsonl:1: not a history record: Object missing required field `type`"),
    (b'{"type": "ok", "op_id": "x"}\n', "completion 'x' without invoke"),
])
def test_the_checkers_typed_reader_refuses_what_is_not_a_history(tmp_path: Path, content: bytes,
                                                                 match: str) -> None:
    path = tmp_path / "w.jsonl"
    path.write_bytes(content)
    with pytest.raises(HistoryError, match=match):
        list(read_records([path]))


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    _two_operations(path)
    path.write_bytes(path.read_bytes().replace(b"\n", b"\n\n  \n", 1))
    assert len(list(iter_operations([path]))) == 2


def test_every_consumer_reads_the_same_operations(tmp_path: Path) -> None:
    """The report and the probe (iter_operations), the checker's passes (read_pairs,
    HistoryFiles) and the invariants (merge_operation) go through one reader."""
    _two_operations(tmp_path / "a.jsonl")
    with open(tmp_path / "a.jsonl", "ab") as handle:  # a null in the completion erases nothing
        handle.write(b'{"type":"invoke","op_id":"x:1","op":"pay","order_id":"o2","time":5.0}\n')
        handle.write(b'{"type":"ok","op_id":"x:1","op":"pay","order_id":null,"error":null,"time":6.0,'
                     b'"answer":{"order_id":"o2","status":"PAID","provider_ref":null}}\n')
        handle.write(b'{"type":"invoke","op_id":"x:2","op":"pay","ti')
    paths = history_files(tmp_path)
    merged = list(iter_operations(paths))
    assert [merge_operation(*pair) for pair in read_pairs(paths)] == merged == list(HistoryFiles(paths))
    assert len(merged) == 3
    # the checker's fold reads typed records of the same operations: each field it
    # keeps has the merged operation's value
    # (an answer's fields too, a null dropped like any other)
    typed = [merge_records(*pair) for pair in read_records(paths)]
    assert [record.pop("answer", None) for record in typed] == [None, None, {"order_id": "o2", "status": "PAID"}]
    fields = {"type", *Invoke.__struct_fields__, *Completion.__struct_fields__}
    assert typed == [{name: value for name, value in op.items() if name in fields
                      and value is not None and name != "answer"} for op in merged]
    assert [record["type"] for record in typed] == ["ok", "ok", "ok"]
    (late,) = [op for op in merged if op["op_id"] == "x:1"]
    assert late["order_id"] == "o2" and (late["invoke_time"], late["complete_time"], late["time"]) == (5.0, 6.0, 5.0)


def test_merge_operation_changes_neither_record() -> None:
    invoke = {"type": "invoke", "op_id": "a", "order_id": "o", "time": 1.0}
    done = {"type": "ok", "op_id": "a", "order_id": None, "status": 200, "time": 2.0}
    merged = merge_operation(invoke, done)
    assert merged == {"type": "ok", "op_id": "a", "order_id": "o", "status": 200, "time": 1.0,
                      "invoke_time": 1.0, "complete_time": 2.0}
    assert invoke == {"type": "invoke", "op_id": "a", "order_id": "o", "time": 1.0}
    assert done["order_id"] is None
    assert merge_operation(merged, merged) == merged and merge_operation(merged, merged) is not merged


def test_complete_names_the_completion_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "w.jsonl") as writer:
        client = Client(writer, worker="w", user=0)
        client.invoke("publish", message_id="m1").complete("fail", status=None)
        with pytest.raises(HistoryError, match="unknown completion"):
            client.invoke("publish", message_id="m2").complete("maybe")
        client.outstanding = None
        client.invoke("publish", message_id="m3").complete("info", error="reset")
        assert client.process == "w-u0-p1"  # an info renames the process
    kinds = sorted((o["message_id"], o["type"]) for o in iter_operations(history_files(tmp_path)))
    assert kinds == [("m1", "fail"), ("m2", "info"), ("m3", "info")]  # m2: never completed


def test_an_abandoned_operation_reads_as_info_and_the_client_goes_on_renamed(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "w.jsonl") as writer:
        client = Client(writer, worker="w", user=0)
        client.invoke("pay", order_id="o1")
        client.abandon()  # its greenlet was killed: no completion will come
        client.invoke("pay", order_id="o2").ok(status=200)
    operations = list(iter_operations(history_files(tmp_path)))
    assert sorted((o["order_id"], o["type"], o["process"]) for o in operations) == [
        ("o1", "info", "w-u0-p0"), ("o2", "ok", "w-u0-p1")]


# --- what records say about requests and answers (issue 9) --------------------------

def test_every_invoke_records_tenant_and_expect(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "w.jsonl") as writer:
        client = Client(writer, worker="w", user=0)
        client.invoke("publish", message_id="m1").ok()
        client.invoke("read_order", tenant="tenant-a", order_id="o1").fail(status=404)
    plain, read = iter_operations(history_files(tmp_path))
    assert (plain["tenant"], plain["expect"]) == ("default", None)
    assert "must_reject" not in plain and "reject_status" not in plain
    assert (read["op"], read["tenant"], read["order_id"], read["type"]) == (
        "read_order", "tenant-a", "o1", "fail")


@pytest.mark.parametrize(("expect", "status"), sorted(REJECT_STATUS.items()))
def test_a_deliberate_refusal_records_must_reject_and_the_documented_status(
        tmp_path: Path, expect: str, status: int) -> None:
    with HistoryWriter(tmp_path / "w.jsonl") as writer:
        Client(writer, worker="w", user=0).invoke("pay", expect=expect).fail(status=status)
    (operation,) = iter_operations(history_files(tmp_path))
    assert operation["must_reject"] is True and operation["reject_status"] == status


def test_the_documented_refusals() -> None:
    assert REJECT_STATUS == {
        "stale_signature": 401, "future_signature": 401, "tampered_signature": 401,
        "missing_signature": 401, "wrong_amount": 422, "conflicting_ref": 409,
        "fingerprint_mismatch": 409, "cross_tenant_read": 404, "cross_tenant_pay": 404,
    }
    # Duplicates the app must accept (replay, already paid, skip) are not refusals.
    for accepted in ("retry_after_timeout", "double_click", "shared_key", "webhook_burst",
                     "cross_channel", "producer_duplicate"):
        assert accepted not in REJECT_STATUS


def test_unknown_operations_are_refused() -> None:
    with pytest.raises(HistoryError, match="unknown operation"):
        Client(None, worker="w", user=0).invoke("delete_order")


ORDER_DOCUMENT = {
    "id": "ord_1", "tenant": "tenant-a", "idempotency_key": "k1", "sku": "sku-1", "quantity": 2,
    "amount_cents": 1200, "currency": "EUR", "status": "PAID", "created_at": 1.0,
    "provider_ref": "pr1",
}


@pytest.mark.parametrize("op", ["create_order", "read_order"])
def test_an_order_answer_is_summarised(op: str) -> None:
    assert answer_summary(op, ORDER_DOCUMENT) == {
        "order_id": "ord_1", "tenant": "tenant-a", "sku": "sku-1", "quantity": 2,
        "amount_cents": 1200, "status": "PAID", "idempotency_key": "k1", "provider_ref": "pr1",
    }
    assert list(answer_summary(op, ORDER_DOCUMENT)) == list(ORDER_ANSWER_FIELDS)


def test_a_missing_answer_field_is_null_not_dropped() -> None:
    summary = answer_summary("create_order", {"id": "ord_2", "tenant": "default"})
    assert summary is not None and set(summary) == set(ORDER_ANSWER_FIELDS)
    assert summary["provider_ref"] is None and summary["sku"] is None


@pytest.mark.parametrize("op", ["pay", "webhook"])
def test_a_payment_answer_is_summarised_from_its_order(op: str) -> None:
    body = {"order": ORDER_DOCUMENT, "already_paid": True}
    assert answer_summary(op, body) == {
        "order_id": "ord_1", "tenant": "tenant-a", "status": "PAID", "provider_ref": "pr1",
        "amount_cents": 1200, "already_paid": True,
    }
    assert list(answer_summary(op, body)) == list(PAYMENT_ANSWER_FIELDS)
    assert answer_summary(op, {"already_paid": False})["order_id"] is None


def test_no_answer_without_a_json_object() -> None:
    assert answer_summary("create_order", None) is None
    assert answer_summary("pay", [1, 2]) is None
    assert answer_summary("publish", ORDER_DOCUMENT) is None


def test_problem_type_is_the_bodys_type() -> None:
    assert problem_type({"type": "/problems/unknown-order", "status": 404}) == "/problems/unknown-order"
    assert problem_type({"title": "no type"}) is None
    assert problem_type("text") is None


def test_answer_and_problem_type_survive_the_merge(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "w.jsonl") as writer:
        client = Client(writer, worker="w", user=0)
        client.invoke("create_order", tenant="tenant-b", idempotency_key="k", sku="sku-1").ok(
            status=201, answer=answer_summary("create_order", ORDER_DOCUMENT), order_id="ord_1")
        client.invoke("pay", tenant="tenant-a", expect="cross_tenant_pay", order_id="ord_1").fail(
            status=404, problem_type="/problems/unknown-order")
    created, refused = iter_operations(history_files(tmp_path))
    assert created["answer"]["tenant"] == "tenant-a" and created["tenant"] == "tenant-b"
    assert refused["problem_type"] == "/problems/unknown-order"
    assert refused["must_reject"] is True and refused["reject_status"] == 404


def test_threads_sharing_a_history_each_get_a_client_and_lose_no_line(tmp_path: Path) -> None:
    """Eight threads, 200 operations each, one file: every line whole, every operation
    paired, one logical process per thread."""
    path = tmp_path / "shared.jsonl"
    start = threading.Barrier(8)

    def work(history: SharedHistory) -> None:
        start.wait()
        for n in range(200):
            client = history.client()
            assert client is history.client()  # the same one for the whole thread
            client.invoke("read_order", order_id=f"o-{n}").ok(status=200)

    with SharedHistory(path, worker="final", flush_interval=0.01) as history:
        threads = [threading.Thread(target=work, args=(history,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    operations = list(iter_operations([path]))
    assert len(operations) == 8 * 200 and all(op["type"] == "ok" and op["status"] == 200 for op in operations)
    assert sorted({op["process"] for op in operations}) == sorted(f"final-u{user}-p0" for user in range(1, 9))
