"""A small HTTP service with ten distinct Redis steps, for
benchmarks/bench_every_step.py (the plan `every-step`'s speed).

    python benchmarks/every_step_app.py --port 8095 --redis 127.0.0.1:6379

POST /items with an Idempotency-Key: GET idem:<h> (a stored answer is replayed), SET
lock:<h> NX (taken: 409), INCR counter:<id>, HSET item:<id>, SADD owner:<id>, EXPIRE
item:<id>, SET idem:<h> (the answer), DEL lock:<h>; <h> is the key's SHA-1 and <id> a
fresh uuid, so the proxy's key patterns give eight steps, and redis-py's handshake on
each new connection (after every restart) two more: ten. GET /healthz answers 200. Standard library and redis-py only, so that the
probe's restart after each crash is quick.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import redis


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis", required=True, help="host:port")
    args = parser.parse_args()
    host, _, port = args.redis.rpartition(":")
    local = threading.local()

    def client() -> redis.Redis:
        if getattr(local, "client", None) is None:
            local.client = redis.Redis(host=host, port=int(port), socket_timeout=3)
        return local.client  # type: ignore[no-any-return]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes, replayed: bool = False) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if replayed:
                self.send_header("Idempotent-Replayed", "true")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(200 if self.path == "/healthz" else 404, b"{}")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            key = self.headers.get("Idempotency-Key")
            if self.path != "/items" or not key:
                self._send(400, b'{"error": "POST /items with an Idempotency-Key"}')
                return
            h = hashlib.sha1(key.encode()).hexdigest()
            try:
                db = client()
                stored = db.get(f"idem:{h}")
                if stored is not None:
                    self._send(201, stored if isinstance(stored, bytes) else str(stored).encode(), replayed=True)
                    return
                if not db.set(f"lock:{h}", b"1", nx=True, px=5000):
                    self._send(409, b'{"error": "in flight"}')
                    return
                item = uuid.uuid4().hex
                db.incr(f"counter:{item}")
                db.hset(f"item:{item}", mapping={"key": key})
                db.sadd(f"owner:{item}", "probe")
                db.expire(f"item:{item}", 3600)
                body = json.dumps({"id": item}).encode()
                db.set(f"idem:{h}", body)
                db.delete(f"lock:{h}")
            except redis.RedisError:
                local.client = None
                self._send(503, b'{"error": "redis"}')
                return
            self._send(201, body)

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
