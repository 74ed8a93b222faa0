"""Stored failures: the late retries after the load (against a small HTTP server) and
the rule that tells an unmarked replayed 5xx from a new failure (hand-built histories)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness.history import history_files, iter_operations
from harness.probe.checker import check
from harness.probe.config import parse_config
from harness.probe.late_retries import LATE_RETRY, late_retries

ENDPOINT = {"name": "pay", "path": "/p", "body": {"a": "{int:1-9}"}, "id": {"pointer": "/id"}}
CONFIG = parse_config({"identities": [{"Authorization": "Bearer a"}, {"Authorization": "Bearer b"}],
                       "endpoints": [ENDPOINT]})


def op(key: str | None, kind: str = "first", type: str = "ok", *, status: int | None = None, at: float = 1.0,
       digest: str = "d", rid: str | None = "r1", identity: int | None = 0, replayed: bool | None = None,
       body: Any = None) -> dict[str, Any]:
    return {"op": "create_order", "op_id": f"{key}-{kind}-{at}", "type": type, "endpoint": "pay",
            "idempotency_key": key, "identity": identity, "expect": kind, "fingerprint": "f1",
            "status": status or {"ok": 201, "fail": 409, "info": 503}[type], "body_digest": digest,
            "resource_id": rid if type == "ok" else None, "invoke_time": at, "complete_time": at + 0.05,
            "replayed": replayed, "body": body if body is not None else {"a": 1}}


def fidelity(ops: list[dict[str, Any]], faults: list[dict[str, Any]]) -> Any:
    result = check(ops, CONFIG, faults=faults, min_acknowledged=1)
    return next(inv for inv in result.invariants if inv.name == "replay_fidelity")


WINDOW = [{"start": 0.5, "end": 1.5, "name": "w0"}]


def test_a_5xx_repeated_while_the_service_is_well_is_a_replay() -> None:
    ops = [op("k", "first", "info", at=1.0, digest="e503"), op("f", "first", at=2.0, rid="r2"),
           op("k", LATE_RETRY, "info", at=3.0, digest="e503")]
    found = fidelity(ops, WINDOW)
    assert not found.passed and "without a replay mark" in found.violations[0]["message"]


@pytest.mark.parametrize(("change", "why"), [
    ({"at": 1.2}, "the retry came inside the fault window"),
    ({"digest": "other"}, "another failure, not the same answer"),
    ({"kind": "retry_after_timeout"}, "during the load a dependency may fail where no window says so"),
])
def test_a_new_failure_is_not_a_replay(change: dict[str, Any], why: str) -> None:
    retry = {"at": 3.0, "digest": "e503", "kind": LATE_RETRY, **change}
    ops = [op("k", "first", "info", at=1.0, digest="e503"), op("f", "first", at=0.1, rid="r2"),
           op("f2", "first", at=max(1.1, retry["at"] - 0.5), rid="r3"),
           op("k", retry["kind"], "info", at=retry["at"], digest=retry["digest"])]
    assert fidelity(ops, WINDOW).passed, why


def test_without_a_fresh_success_since_the_failure_nothing_is_proved() -> None:
    ops = [op("f", "first", at=0.1, rid="r2"), op("k", "first", "info", at=1.0, digest="e503"),
           op("k", LATE_RETRY, "info", at=3.0, digest="e503"),
           op("g", "replay", at=2.0, rid="r3", replayed=True)]  # a replayed success proves no health
    assert fidelity(ops, WINDOW).passed


def test_a_late_retry_refused_as_in_flight_is_a_stuck_key() -> None:
    ops = [op("k", "first", "info", at=1.0), op("k", LATE_RETRY, "fail", status=409, at=3.0)]
    result = check(ops, CONFIG, min_acknowledged=1)
    in_flight = next(inv for inv in result.invariants if inv.name == "in_flight_refused_or_waited")
    assert "stuck in flight" in in_flight.violations[0]["message"]


def _clock(mode: str, delta: float, *, end: float = 2.0) -> dict[str, Any]:
    return {"name": "w0", "kind": "clock", "clock": mode, "delta": delta, "start": 1.5, "end": end}


@pytest.mark.parametrize(("fault", "judged"), [
    (_clock("strobe", 30.0), False),  # every flip back holds the request's timers 30 s
    (_clock("skew", 90.0), False),  # set back 90 s at its end
    (_clock("jump", -30.0), False),  # a jump back
    (_clock("jump", 7200.0), True),  # a jump forward holds nothing: the key is stuck
    (_clock("strobe", 0.5), True),  # its hold is over before the retry
])
def test_a_late_retry_in_flight_while_a_clock_moved_back_holds_the_first_is_not_stuck(
        fault: dict[str, Any], judged: bool) -> None:
    """libfaketime moves the service's monotonic clock back with its wall clock: a request
    asleep then sleeps that much longer, and its key is in flight with nothing wrong."""
    ops = [op("k", "first", "info", at=1.0), op("k", LATE_RETRY, "fail", status=409, at=3.0)]
    result = check(ops, CONFIG, min_acknowledged=1, faults=[fault])
    in_flight = next(inv for inv in result.invariants if inv.name == "in_flight_refused_or_waited")
    assert (not in_flight.passed) is judged, in_flight.violations


def test_the_late_retries_wait_for_a_clock_hold_to_be_over(service: tuple[str, list[dict[str, Any]]],
                                                           tmp_path: Path) -> None:
    url, _ = service
    ops = [op("k", "first", "info", at=1.0)]
    start = time.time()
    assert late_retries(CONFIG, url, ops, tmp_path, not_before=start + 1.5) == 1
    sent = [o for o in iter_operations(history_files(tmp_path)) if o.get("expect") == LATE_RETRY]
    assert sent and sent[0]["invoke_time"] >= start + 1.5, sent


@pytest.fixture
def service() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Answers 201 with a new id, and records each request (key, authorization, body)."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append({"key": self.headers.get("Idempotency-Key"), "auth": self.headers.get("Authorization"),
                         "body": json.loads(raw)})
            answer = json.dumps({"id": f"r{len(seen)}"}).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_what_never_succeeded_is_retried_once_as_it_was_sent(service: tuple[str, list[dict[str, Any]]],
                                                             tmp_path: Path) -> None:
    upstream, seen = service
    ops = [op("lost", "first", "info", at=1.0, identity=1, body={"a": 7}),
           op("lost", "retry_after_timeout", "info", at=1.2, identity=1, body={"a": 7}),
           op("done", "first", "info", at=1.0, body={"a": 2}), op("done", "retry_after_timeout", at=1.3),
           op("refused", "first", "fail", status=422, at=1.0),
           op("waited", "first", "fail", status=409, at=1.0, identity=0, body={"a": 3}),
           op("mismatch", "first", at=1.0), op("mismatch", "payload_mismatch", "info", at=1.5, body={"a": 9})]
    history = tmp_path / "history"
    history.mkdir()
    assert late_retries(CONFIG, upstream, ops, history) == 2
    # One fresh request first (the service answers again), then the lost one, as Bob, same
    # body, and the one last refused as in flight.
    assert sorted((r["key"], r["auth"], json.dumps(r["body"])) for r in seen[1:]) == [
        ("lost", "Bearer b", '{"a": 7}'), ("waited", "Bearer a", '{"a": 3}')]
    assert seen[0]["key"].startswith("probe-late-")
    recorded = list(iter_operations(history_files(history)))
    late = [r for r in recorded if r.get("expect") == LATE_RETRY]
    lost = next(r for r in late if r["idempotency_key"] == "lost")
    assert len(late) == 2 and lost["type"] == "ok" and lost["identity"] == 1 and lost["resource_id"]
    assert late_retries(CONFIG, upstream, [op("k", "first", at=1.0)], history) == 0


def test_a_late_retry_without_an_answer_while_fresh_requests_work_is_a_stuck_key() -> None:
    timeout = {"type": "info", "status": None, "error": "ReadTimeout"}
    ops = [op("k", "first", "info", at=1.0), op("f", "first", at=2.0, rid="r2"),
           {**op("k", LATE_RETRY, at=2.1), **timeout, "resource_id": None}]
    result = check(ops, CONFIG, faults=WINDOW, min_acknowledged=1)
    in_flight = next(inv for inv in result.invariants if inv.name == "in_flight_refused_or_waited")
    assert "is stuck: its late retry" in in_flight.violations[0]["message"]
    # Without a fresh success after the last fault, a silent service proves nothing about the key.
    early = [op("k", "first", "info", at=1.0), op("f", "first", at=1.2, rid="r2"),
             {**op("k", LATE_RETRY, at=2.1), **timeout, "resource_id": None}]
    assert all(inv.passed for inv in check(early, CONFIG, faults=WINDOW, min_acknowledged=1).invariants
               if inv.name == "in_flight_refused_or_waited")


def test_a_mismatch_refused_as_in_flight_while_the_first_may_still_run_is_fair() -> None:
    codes = "expected_codes"
    # 422 written: the user's contract, so a 409 that is not fair fails.
    written = parse_config({**CONFIG.to_dict(), "endpoints": [{**ENDPOINT, "expect": {"payload_mismatch": 422}}]})
    base = [op("k", "first", "info", at=1.0), op("k", "retry_after_timeout", at=1.5)]
    mismatch = {**op("k", "payload_mismatch", "fail", status=409, at=2.0), "fingerprint": "f2"}
    result = check([*base, mismatch], written, min_acknowledged=1)
    assert next(inv for inv in result.invariants if inv.name == codes).passed and not result.advice
    # Nothing of the first payload unanswered before it: 409 is not the configured 422.
    settled = [op("k", "first", at=1.0), mismatch]
    result = check(settled, written, min_acknowledged=1)
    assert not next(inv for inv in result.invariants if inv.name == codes).passed


def test_an_in_flight_refusal_waited_out_and_then_answered_is_not_stuck() -> None:
    waited = [op("k", "first", "info", at=1.0), op("k", LATE_RETRY, "fail", status=409, at=3.0),
              op("k", LATE_RETRY, at=4.5)]
    result = check(waited, CONFIG, min_acknowledged=1)
    assert next(inv for inv in result.invariants if inv.name == "in_flight_refused_or_waited").passed
    # Still refused after the wait the service asked for: stuck.
    still = [*waited[:2], op("k", LATE_RETRY, "fail", status=409, at=4.5)]
    result = check(still, CONFIG, min_acknowledged=1)
    in_flight = next(inv for inv in result.invariants if inv.name == "in_flight_refused_or_waited")
    assert len(in_flight.violations) == 1 and "stuck in flight" in in_flight.violations[0]["message"]


@pytest.mark.parametrize(("retry_after", "asked"), [("1", 2), ("600", 1), (None, 1)])
def test_a_bounded_retry_after_is_waited_out_once(tmp_path: Path, retry_after: str | None, asked: int) -> None:
    """A key refused as in flight with a Retry-After the late retries may wait out is asked
    again once that time has passed (a lease left by a request that died); a longer one,
    or none, is not waited for."""
    seen: list[float] = []

    class Leased(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Idempotency-Key", "").startswith("probe-late-"):
                status, answer = 201, b'{"id": "fresh"}'
            else:
                seen.append(time.monotonic())
                status, answer = (409, b'{"title": "in progress"}') if len(seen) == 1 else (201, b'{"id": "r9"}')
            self.send_response(status)
            if status == 409 and retry_after is not None:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Leased)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        history = tmp_path / "history"
        history.mkdir()
        sent = late_retries(CONFIG, f"127.0.0.1:{server.server_address[1]}",
                            [op("k", "first", "info", at=1.0)], history)
    finally:
        server.shutdown()
        server.server_close()
    assert sent == asked == len(seen)
    if asked == 2:
        assert seen[1] - seen[0] >= 1.0  # after the wait the service named, not before
        recorded = [r for r in iter_operations(history_files(history)) if r.get("expect") == LATE_RETRY]
        assert [r["type"] for r in sorted(recorded, key=lambda r: r["invoke_time"])] == ["fail", "ok"]
