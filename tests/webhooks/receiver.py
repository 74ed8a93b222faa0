"""Tiny webhook receivers for the tests, on free loopback ports, stopped after the test.

`Receiver` is a WSGI app under werkzeug's threaded server: it verifies each delivery
with the independent verifiers (tests/webhooks/verifiers.py, not harness code), answers
400 when one refuses, dedupes on the provider's event id and records every arrival and
every applied fact. Flags make it misbehave the ways a provider must cope with:
`fail_first` (500 on the first arrival of each event id, nothing applied), `slow_first`
(seconds to stall the first arrival of each id before answering: past the provider's
timeout, so it retries while the first is still running), `barrier` (hold each request
until that many are in flight at once: proves copies really were concurrent). And the
receiver bugs the deliveries exist to expose: `verify=False` (takes any signature),
`refuse_future=False` (relies on stripe-python alone, which lets a future timestamp
through), `racy` (check-then-insert on the event id with that many seconds between the
check and the insert, without a lock).

`reset_server()` accepts connections and resets them without answering.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from werkzeug.serving import make_server

from harness.ports import free_port
from tests.webhooks.verifiers import independent_event_id, independent_verify


@dataclass
class Arrival:
    event_id: str | None
    fact: str | None
    status: int
    refusal: str | None
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    scheme: str
    secret: str
    tolerance: int = 300
    fact_pointer: Callable[[Any], Any] = field(default=lambda data: data["data"]["object"]["id"])
    fail_first: bool = False
    slow_first: float = 0.0
    barrier: int = 0
    verify: bool = True
    refuse_future: bool = True
    racy: float = 0.0
    arrivals: list[Arrival] = field(default_factory=list)
    applied: list[tuple[str, str | None]] = field(default_factory=list)
    url: str = ""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._failed: set[str] = set()
        self._barrier = threading.Barrier(self.barrier) if self.barrier else None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        headers = {key[5:].replace("_", "-").title(): value for key, value in environ.items()
                   if key.startswith("HTTP_")}
        if "CONTENT_TYPE" in environ:
            headers["Content-Type"] = environ["CONTENT_TYPE"]
        status, refusal, event_id, fact = self._handle(body, headers)
        with self._lock:
            self.arrivals.append(Arrival(event_id, fact, status, refusal, headers, body))
        start_response(f"{status} X", [("Content-Type", "text/plain")])
        return [(refusal or "ok").encode()]

    def _handle(self, body: bytes, headers: dict[str, str]) -> tuple[int, str | None, str | None, str | None]:
        if self._barrier is not None:
            try:
                self._barrier.wait(timeout=5)
            except threading.BrokenBarrierError:
                return 503, "not concurrent", None, None
        if self.verify:
            refusal = independent_verify(self.scheme, self.secret, body, headers, self.tolerance,
                                         future=self.refuse_future)
            if refusal is not None:
                return 400, refusal, None, None
        event_id = independent_event_id(self.scheme, body, headers)
        fact = str(self.fact_pointer(json.loads(body)))
        if self.racy:
            seen = event_id in self._seen  # the check ...
            time.sleep(self.racy)
            self._seen.add(event_id or "")  # ... and the insert, with a window between them
            if not seen:
                with self._lock:
                    self.applied.append((event_id or "", fact))
            return 200, None, event_id, fact
        with self._lock:
            if self.fail_first and event_id not in self._failed:
                self._failed.add(event_id or "")
                return 500, "failing the first try", event_id, fact
            first = event_id not in self._seen
            self._seen.add(event_id or "")
        if first:
            if self.slow_first:
                time.sleep(self.slow_first)
            with self._lock:
                self.applied.append((event_id or "", fact))
        return 200, None, event_id, fact


@contextmanager
def running(receiver: Receiver) -> Iterator[Receiver]:
    """The receiver served on a free loopback port (`receiver.url`) for the block."""
    port = free_port()
    server = make_server("127.0.0.1", port, receiver, threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{port}"
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def reset_server() -> Iterator[str]:
    """A base URL whose server reads each request and resets the connection (no answer)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                continue
            with connection:
                connection.settimeout(1)
                try:
                    connection.recv(65536)
                except OSError:
                    pass
                # SO_LINGER 0: close sends an RST instead of a FIN.
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
