"""Final reads: which orders the history names, with their owning tenant, and the
reads themselves against a small HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.check.final_reads import OrderToRead, orders_to_read, read_orders
from harness.errors import HarnessError


def test_the_creating_tenant_owns_an_order() -> None:
    ops = [
        {"op": "pay", "type": "fail", "tenant": "tenant-b", "order_id": "o1", "must_reject": True},
        {"op": "create_order", "type": "ok", "tenant": "tenant-a", "answer": {"order_id": "o1"}},
        {"op": "create_order", "type": "info", "tenant": "tenant-a", "order_id": None},
        {"op": "publish", "type": "ok", "tenant": "default", "order_id": "o2"},
        {"op": "pay", "type": "ok", "tenant": "tenant-b", "order_id": "o3"},
        {"op": "read_order", "type": "fail", "tenant": "tenant-a", "order_id": "o3", "must_reject": True},
    ]
    assert orders_to_read(ops) == [OrderToRead("o1", "tenant-a"), OrderToRead("o2", "default"),
                                   OrderToRead("o3", "tenant-b")]


def test_an_order_only_a_cross_tenant_attempt_names_is_not_read_as_that_tenant() -> None:
    ops = [{"op": "read_order", "type": "fail", "tenant": "tenant-b", "order_id": "o9", "must_reject": True}]
    assert orders_to_read(ops) == []


class _Orders(BaseHTTPRequestHandler):
    orders = {("o1", "tenant-a"): {"id": "o1", "tenant": "tenant-a", "status": "PAID"}}
    failures = {"boom"}

    def do_GET(self) -> None:  # noqa: N802 - the http.server hook name
        order_id = self.path.rsplit("/", 1)[-1]
        tenant = self.headers.get("X-Tenant-ID", "default")
        if order_id in self.failures:
            self.send_response(503)
            self.end_headers()
            return
        order = self.orders.get((order_id, tenant))
        body = json.dumps(order).encode() if order else b'{"status":404}'
        self.send_response(200 if order else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def orders_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Orders)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_reads_write_one_line_per_order_with_the_tenant_header(orders_url: str, tmp_path: Path) -> None:
    destination = tmp_path / "final_reads.ndjson"
    count = read_orders(orders_url, [OrderToRead("o1", "tenant-a"), OrderToRead("o2", "default")],
                        destination)
    lines = [json.loads(line) for line in destination.read_text().splitlines()]
    assert count == 2
    assert lines[0] == {"order_id": "o1", "tenant": "tenant-a", "status_code": 200,
                        "order": {"id": "o1", "tenant": "tenant-a", "status": "PAID"}}
    assert lines[1] == {"order_id": "o2", "tenant": "default", "status_code": 404, "order": None}


def test_a_read_that_keeps_failing_is_a_harness_failure(orders_url: str, tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="final read of order boom"):
        read_orders(orders_url, [OrderToRead("boom", "default")], tmp_path / "reads.ndjson")
