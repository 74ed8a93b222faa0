from pathlib import Path

import pytest

from harness.history import (
    Client,
    HistoryError,
    HistoryWriter,
    fingerprint,
    history_files,
    iter_operations,
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


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    with HistoryWriter(path) as writer:
        Client(writer, worker="w", user=0).invoke("publish").ok()
    with open(path, "ab") as handle:
        handle.write(b'{"type": "inv')
    assert len(list(iter_operations([path]))) == 1


def test_fingerprint_covers_method_path_and_body() -> None:
    base = fingerprint("POST", "/a", b"{}")
    assert base == fingerprint("post", "/a", b"{}")
    assert base != fingerprint("POST", "/b", b"{}")
    assert base != fingerprint("POST", "/a", b"{ }")
    assert base != fingerprint("PUT", "/a", b"{}")
