"""A stand-in for the app's internal crash-point endpoints, on a free loopback port.

It speaks the contract of docs/target-app.md ("Crash points"): list, arm (PUT), disarm
one or all (DELETE), the hit log; problem+json errors; the bearer token. A test can
make it misbehave the ways a verifying client must notice: `ignore_arm` (a PUT
answered 200 that changes nothing), `ignore_disarm` (a DELETE answered 200 that
leaves the point armed), `wrong_probability` (armed, but with another probability).
`fire(name)` records one hit of an armed point, as a firing in the app would.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from harness.catalog import CRASH_POINTS

TOKEN = "fake-internal-token"
PREFIX = "/internal/v1/crash-points"
ACTIONS = ("crash", "error", "delay")
AFTER_WORK = ("api.after_store", "webhook.after_apply", "consumer.after_inbox_mark")


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class FakeCrashPoints:
    """The endpoints' state, one lock around it (the server answers in one thread)."""

    def __init__(self, points: Iterable[str] = tuple(CRASH_POINTS)) -> None:
        self.points = list(points)
        self.armed: dict[str, dict[str, Any]] = {}
        self.hit_log: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str]] = []
        self.ignore_arm = False
        self.ignore_disarm = False
        self.wrong_probability = False
        self.lock = threading.Lock()

    def actions(self, name: str) -> list[str]:
        return [*ACTIONS, "drop-reply"] if name in AFTER_WORK else list(ACTIONS)

    def fire(self, name: str, *, at: float | None = None) -> None:
        with self.lock:
            assert name in self.armed, f"{name} is not armed"
            self.hit_log.append({"name": name, "action": self.armed[name]["action"], "process": "app",
                                 "pid": 4242, "at": time.time() if at is None else at})

    def entry(self, name: str) -> dict[str, Any]:
        layer, process = CRASH_POINTS.get(name, ("api", "app"))
        return {"name": name, "layer": layer, "process": process, "description": f"after {name}",
                "actions": self.actions(name), "armed": self.armed.get(name),
                "hits": sum(1 for hit in self.hit_log if hit["name"] == name)}

    # -- WSGI -------------------------------------------------------------------
    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        method, path = environ["REQUEST_METHOD"], environ["PATH_INFO"]
        with self.lock:
            self.requests.append((method, path))
            status, body = self._answer(environ, method, path)
        payload = json.dumps(body).encode()
        kind = "application/problem+json" if status >= 400 else "application/json"
        start_response(f"{status} X", [("Content-Type", kind), ("Content-Length", str(len(payload)))])
        return [payload]

    def _answer(self, environ: dict[str, Any], method: str, path: str) -> tuple[int, Any]:
        if environ.get("HTTP_AUTHORIZATION") != f"Bearer {TOKEN}":
            return 401, {"title": "Unauthorized", "status": 401, "detail": "bad token"}
        if not path.startswith(PREFIX):
            return 404, {"title": "Not Found", "status": 404, "detail": "no such route"}
        rest = path[len(PREFIX):].lstrip("/")
        if rest == "" and method == "GET":
            return 200, {"points": [self.entry(name) for name in self.points]}
        if rest == "" and method == "DELETE":
            if not self.ignore_disarm:
                self.armed.clear()
            return 200, {"points": [self.entry(name) for name in self.points]}
        if rest == "hits" and method == "GET":
            return 200, {"hits": list(self.hit_log)}
        if rest not in self.points:
            return 404, {"title": "Not Found", "status": 404, "detail": f"no crash point {rest}"}
        if method == "PUT":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            document = json.loads(environ["wsgi.input"].read(length) or b"{}")
            if document.get("action") not in self.actions(rest):
                return 422, {"title": "Unprocessable", "status": 422,
                             "detail": f"action: {rest} takes {', '.join(self.actions(rest))}, "
                                       f"not {document.get('action')}"}
            arming = {"action": document["action"], "probability": document.get("probability", 1.0),
                      "count": document.get("count"), "delay_ms": document.get("delay_ms", 0)}
            if self.wrong_probability:
                arming["probability"] = 0.01
            if not self.ignore_arm:
                self.armed[rest] = arming
            return 200, self.entry(rest)
        if method == "DELETE":
            if not self.ignore_disarm:
                self.armed.pop(rest, None)
            return 200, self.entry(rest)
        return 405, {"title": "Method Not Allowed", "status": 405, "detail": method}


@contextmanager
def serving(fake: FakeCrashPoints) -> Iterator[str]:
    """Serve `fake` on a free loopback port for the block; yields its base URL."""
    server = make_server("127.0.0.1", 0, fake, server_class=WSGIServer, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
