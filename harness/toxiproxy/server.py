"""Run the embedded Toxiproxy: `serve` (async), `run_server` (blocking, with
signal handling) and `EmbeddedToxiproxy` (a background thread, for tests and
embedding).

All three take the real server's options: `config` (a JSON file in `/populate`'s
format, applied before the API listens; a file that cannot be read or applied is
reported on stderr and the server runs on, as `toxiproxy-server -config` does),
`proxy_metrics` and `runtime_metrics` (they enable `GET /metrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from harness.toxiproxy.api import ToxiproxyApi
from harness.toxiproxy.errors import ToxiproxyError
from harness.toxiproxy.httpserver import serve_connection


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (much faster forwarding), else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _announce(host: str, port: int) -> None:
    print(f"toxiproxy listening on http://{host}:{port}", flush=True)


@dataclass(frozen=True)
class ServerOptions:
    """The real server's startup options besides host and port."""

    config: str | None = None
    proxy_metrics: bool = False
    runtime_metrics: bool = False


async def _populate_from_file(api: ToxiproxyApi, path: str) -> None:
    try:
        with open(path, "rb") as handle:
            body = handle.read()
    except OSError as exc:
        print(f"toxiproxy: error reading config file {path}: {exc.strerror or exc}", file=sys.stderr, flush=True)
        return
    proxies, error = await api.populate(body)
    if error is not None:
        print(f"toxiproxy: failed to populate proxies from {path}: {error.message}", file=sys.stderr, flush=True)
    else:
        print(f"toxiproxy: populated {len(proxies)} proxies from {path}", file=sys.stderr, flush=True)


async def serve(
    host: str = "127.0.0.1",
    port: int = 8474,
    *,
    ready: Callable[[int], None] | None = None,
    options: ServerOptions = ServerOptions(),
) -> None:
    """Serve the API on host:port until cancelled; then close every listener.
    `ready` gets the bound port (useful with port 0); without it a line
    "toxiproxy listening on http://host:port" is printed."""
    api = ToxiproxyApi(proxy_metrics=options.proxy_metrics, runtime_metrics=options.runtime_metrics)
    connections: set[asyncio.Task[None]] = set()

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connections.add(task)
        try:
            await serve_connection(reader, writer, api.handle)
        except asyncio.CancelledError:
            writer.close()  # shutting down; ending quietly keeps the log clean
        finally:
            connections.discard(task)

    try:
        # Like toxiproxy-server, the config's proxies exist before the API listens.
        if options.config:
            await _populate_from_file(api, options.config)
        server = await asyncio.start_server(on_client, host, port, reuse_address=True, limit=64 * 1024)
    except BaseException:
        await api.close()
        raise
    try:
        bound = server.sockets[0].getsockname()[1]
        if ready is not None:
            ready(bound)
        else:
            _announce(host, bound)
        await asyncio.Future()  # until cancelled
    finally:
        server.close()
        for task in list(connections):
            task.cancel()
        await api.close()


def run_server(host: str = "127.0.0.1", port: int = 8474, options: ServerOptions = ServerOptions()) -> None:
    """Serve until SIGTERM or SIGINT, then close every listener and return."""
    loop = _new_loop()
    asyncio.set_event_loop(loop)
    try:
        task = loop.create_task(serve(host, port, options=options))
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(task)
    except OSError as exc:
        print(f"toxiproxy: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        asyncio.set_event_loop(None)


class EmbeddedToxiproxy:
    """The server on a free loopback port in a background thread with its own loop.

    with EmbeddedToxiproxy() as toxiproxy:
        Nemesis(toxiproxy.url) ...
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        start_timeout: float = 10.0,
        options: ServerOptions = ServerOptions(),
    ) -> None:
        self.host = host
        self.port = port
        self.options = options
        self._start_timeout = start_timeout
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> EmbeddedToxiproxy:
        self._thread = threading.Thread(target=self._run, name="embedded-toxiproxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(self._start_timeout):
            self.stop()
            raise ToxiproxyError("embedded toxiproxy did not start in time")
        if self._error is not None:
            self.stop()
            raise ToxiproxyError(f"embedded toxiproxy failed to start: {self._error}")
        return self

    def _run(self) -> None:
        loop = _new_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)

        def ready(port: int) -> None:
            self.port = port
            self._ready.set()

        try:
            self._task = loop.create_task(serve(self.host, self.port, ready=ready, options=self.options))
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(self._task)
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            self._error = exc
        finally:
            self._ready.set()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def stop(self) -> None:
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> EmbeddedToxiproxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
