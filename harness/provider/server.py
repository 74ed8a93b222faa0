"""The provider as an HTTP server: `EmbeddedProvider` (start/stop/url, in a thread) and
`serve_forever` (the foreground server of `harness provider serve`).

`ProviderConfig` is everything a provider is made from: host and port, the seed (ids and
fault draws), the idempotency window, the accepted secret keys (none: any well-formed
`sk_test_...`), the webhook endpoints and their retry schedule, and where to export the
ledger when the server stops. The HTTP side is the standard library's threading server
speaking HTTP/1.1 with keep-alive (the SDK reuses its connections); each request is
handed to `ProviderApi.handle` (harness.provider.api). Bodies are capped at 1 MiB.

    with EmbeddedProvider(ProviderConfig(seed=7)) as provider:
        client = stripe.StripeClient("sk_test_x", base_addresses={"api": provider.url})
        ...
        provider.ledger.records()
"""

from __future__ import annotations

import random
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

from harness.provider.api import HttpRequest, ProviderApi
from harness.provider.errors import ProviderError
from harness.provider.faults import FaultRule, Faults
from harness.provider.idempotency import DEFAULT_TTL, IdempotencyStore
from harness.provider.ledger import Ledger
from harness.provider.outbox import Endpoint, Outbox
from harness.provider.records import write_ledger
from harness.provider.routes import OPERATIONS
from harness.webhooks.sender import RetrySchedule

MAX_BODY = 1 << 20
DEFAULT_PORT = 12111  # stripe-mock's port, so a setup written for it points here unchanged


@dataclass(frozen=True)
class ProviderConfig:
    host: str = "127.0.0.1"
    port: int = 0
    seed: int = 0
    idempotency_ttl: float = DEFAULT_TTL
    api_keys: frozenset[str] = frozenset()
    webhooks: tuple[Endpoint, ...] = ()
    webhook_schedule: RetrySchedule = field(default_factory=RetrySchedule)
    webhook_timeout: float | None = None  # None: each endpoint's own timeout
    ledger_path: Path | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ProviderError(f"port must be 0-65535, not {self.port}")
        if self.idempotency_ttl <= 0:
            raise ProviderError(f"the idempotency window must be longer than 0s, not {self.idempotency_ttl}")
        if self.ledger_path is not None and not self.ledger_path.parent.is_dir():
            raise ProviderError(f"cannot write the ledger to {self.ledger_path}: "
                                f"{self.ledger_path.parent} is not a directory")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "harness-provider"
    disable_nagle_algorithm = True  # headers and body are two writes: without it, 40 ms per answer
    sys_version = ""

    timeout = 60  # an idle keep-alive connection's thread ends after this long

    def _serve(self) -> None:
        if self.server.closing:  # type: ignore[attr-defined]
            self.close_connection = True  # stopped: a kept-alive connection gets no answer, only closed
            return
        api: ProviderApi = self.server.api  # type: ignore[attr-defined]
        length_text = self.headers.get("Content-Length") or "0"
        try:
            length = int(length_text)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self.send_error(413 if length > MAX_BODY else 400)
            return
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        request = HttpRequest(method=self.command, path=parts.path, query=parts.query,
                              headers={name.lower(): value for name, value in self.headers.items()}, body=body)
        answer = api.handle(request)
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.body)

    do_GET = do_POST = do_DELETE = _serve

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass  # every request is in the ledger; stderr stays for errors


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    closing = False

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that hung up or reset (a probe's toxic, a timed-out SDK) is not a
        # provider error worth a traceback on stderr; anything else still is.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, TimeoutError)):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class EmbeddedProvider:
    """The provider on a loopback port (0: any free one) in a background thread."""

    def __init__(self, config: ProviderConfig | None = None) -> None:
        self.config = config or ProviderConfig()
        self.ledger = Ledger(self.config.seed)
        self.faults = Faults(random.Random(self.config.seed + 2))
        self.idempotency = IdempotencyStore(ttl=self.config.idempotency_ttl)
        self.api = ProviderApi(self.ledger, idempotency=self.idempotency, faults=self.faults,
                               api_keys=self.config.api_keys)
        self.outbox = Outbox(list(self.config.webhooks), self.ledger.log_delivery,
                             schedule=self.config.webhook_schedule, timeout=self.config.webhook_timeout,
                             seed=self.config.seed)
        self.ledger.listeners.append(self.outbox.publish)
        self.port = self.config.port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    def start(self) -> EmbeddedProvider:
        try:
            server = _Server((self.config.host, self.config.port), _Handler)
        except OSError as error:
            raise ProviderError(f"cannot listen on {self.config.host}:{self.config.port}: "
                                f"{error.strerror or error}") from None
        server.api = self.api  # type: ignore[attr-defined]
        self._server = server
        self.port = int(server.server_address[1])
        self.outbox.start()
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="payment-provider", daemon=True)
        self._thread.start()
        return self

    def add_fault(self, rule: FaultRule) -> None:
        """A provider-side fault from now on (the in-process twin of POST /_harness/faults)."""
        self.faults.add(rule, OPERATIONS)

    def stop(self, *, drain_timeout: float = 5.0) -> None:
        """Stop answering, let the webhooks drain (bounded), export the ledger if configured.
        Safe to call twice."""
        server, self._server = self._server, None
        if server is not None:
            server.closing = True
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
            self.outbox.stop(drain_timeout)
            if self.config.ledger_path is not None:
                write_ledger(self.config.ledger_path, self.ledger.records())

    def __enter__(self) -> EmbeddedProvider:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def serve_forever(config: ProviderConfig) -> int:
    """Serve in the foreground until Ctrl-C, SIGTERM or SIGHUP (any `KeyboardInterrupt`),
    then stop and export the ledger; 0 for a clean stop."""
    provider = EmbeddedProvider(config).start()
    print(f"provider listening on {provider.url} (Stripe-compatible; stripe.api_base = \"{provider.url}\")",
          flush=True)
    try:
        while True:
            # Awake every quarter second, never blocked for good: a signal the kernel gave
            # to the server's thread runs its handler here only once this thread wakes.
            time.sleep(0.25)
    except KeyboardInterrupt:
        pass
    finally:
        provider.stop()
        if config.ledger_path is not None:
            print(f"provider: ledger written to {config.ledger_path}", file=sys.stderr, flush=True)
    return 0
