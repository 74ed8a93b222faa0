"""`GET /metrics`: Toxiproxy's Prometheus metrics, rendered by prometheus-client.

With proxy metrics on (`-proxy-metrics`) the server counts bytes per proxy and
direction, under Toxiproxy's names and labels:

    toxiproxy_proxy_received_bytes_total{direction,listener,proxy,upstream}
    toxiproxy_proxy_sent_bytes_total{direction,listener,proxy,upstream}

`received` is what the proxy read from the source of that direction (the client
for upstream, the server for downstream), `sent` what it wrote to the other side;
`listener` and `upstream` are the proxy's addresses when the connection opened.
Toxiproxy adds a connection's bytes when the connection ends; here a scrape also
includes connections still open, so once they close the figures are the same.

With runtime metrics on (`-runtime-metrics`) the registry also carries
prometheus-client's process, platform and GC collectors (`process_*`,
`python_info`, `python_gc_*`), the counterparts of Go's process, build-info and Go
runtime collectors, plus two series under the Go collector's names so scripts
written for the real server find them (Toxiproxy's own end-to-end script greps
for both): `go_info{version}` (here the Python version) and `go_goroutines` (here
the server's running asyncio tasks plus threads, its counterpart of goroutines).
prometheus-client is imported only when a flag is on.
"""

from __future__ import annotations

import asyncio
import gzip
import platform
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from harness.toxiproxy.link import Connection


class ProxyConnections(Protocol):
    """What the counters read of a proxy (harness.toxiproxy.proxy.Proxy is one): its open
    connections. A protocol, so that the proxy imports the metrics and not the reverse."""

    @property
    def connections(self) -> Collection[Connection]: ...

# What Go's promhttp (client_golang 1.23) answers for the text format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"
# Label names in the order Prometheus' text format prints them (sorted), as Go does.
LABELS = ("direction", "listener", "proxy", "upstream")

Key = tuple[str, str, str, str]


def _connection_counts(connection: Connection) -> Iterator[tuple[Key, int, int]]:
    """(labels, received, sent) for each direction of an established connection.
    A client whose upstream never answered had no link, so it counts nothing."""
    if connection.server is None or connection.client is None or connection.up is None:
        return
    for side, direction in ((connection.client, "upstream"), (connection.server, "downstream")):
        key = (direction, connection.listener, connection.proxy.name, connection.upstream_label)
        yield key, side.received, side.sent


class ProxyCounters:
    """Byte totals per label set: connections that closed are folded in here, open
    ones are read live when metrics are collected."""

    def __init__(self, proxies: Callable[[], Iterable[ProxyConnections]]) -> None:
        self._proxies = proxies
        self._closed: dict[Key, list[int]] = {}

    def fold(self, connection: Connection) -> None:
        for key, received, sent in _connection_counts(connection):
            totals = self._closed.setdefault(key, [0, 0])
            totals[0] += received
            totals[1] += sent

    def totals(self) -> dict[Key, list[int]]:
        totals = {key: list(values) for key, values in self._closed.items()}
        for proxy in self._proxies():
            for connection in list(proxy.connections):
                for key, received, sent in _connection_counts(connection):
                    values = totals.setdefault(key, [0, 0])
                    values[0] += received
                    values[1] += sent
        return totals


class _ProxyCollector:
    """A prometheus-client collector over ProxyCounters."""

    def __init__(self, counters: ProxyCounters) -> None:
        self._counters = counters

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        totals = self._counters.totals()
        if not totals:
            return  # Go's registry prints a counter vector only once it has a series
        # Toxiproxy registers these counters without help text; so does this.
        received = CounterMetricFamily("toxiproxy_proxy_received_bytes", "", labels=LABELS)
        sent = CounterMetricFamily("toxiproxy_proxy_sent_bytes", "", labels=LABELS)
        for key in sorted(totals):
            received.add_metric(key, totals[key][0])
            sent.add_metric(key, totals[key][1])
        yield received
        yield sent


class _GoNamesCollector:
    """go_info and go_goroutines, with what stands for them in this server."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        info = GaugeMetricFamily(
            "go_info", "Information about the runtime (here: the Python version).", labels=["version"]
        )
        info.add_metric([f"{platform.python_implementation().lower()}{platform.python_version()}"], 1)
        yield info
        try:
            tasks = len(asyncio.all_tasks())
        except RuntimeError:
            tasks = 0  # collected outside the server's loop
        yield GaugeMetricFamily(
            "go_goroutines",
            "Asyncio tasks and threads running in the server (its counterpart of goroutines).",
            value=tasks + threading.active_count(),
        )


class ServerMetrics:
    """The metrics of one server; `enabled` says whether `/metrics` exists at all."""

    def __init__(self, proxies: Callable[[], Iterable[ProxyConnections]], *, proxy_metrics: bool, runtime_metrics: bool) -> None:
        self.enabled = proxy_metrics or runtime_metrics
        self.counters = ProxyCounters(proxies) if proxy_metrics else None
        self._registry: Any = None
        if not self.enabled:
            return
        from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

        # One registry per server (never the library's global one), so servers
        # in one process, as in tests, do not see each other's metrics.
        self._registry = CollectorRegistry(auto_describe=False)
        if runtime_metrics:
            ProcessCollector(registry=self._registry)
            PlatformCollector(registry=self._registry)
            GCCollector(registry=self._registry)
            self._registry.register(_GoNamesCollector())
        if self.counters is not None:
            self._registry.register(_ProxyCollector(self.counters))

    def render(self, accept_encoding: str = "") -> tuple[bytes, bool]:
        """(body, gzipped): the text exposition, gzipped when the client accepts it
        as Go's promhttp does."""
        from prometheus_client import generate_latest

        body = generate_latest(self._registry)
        if "gzip" in accept_encoding.lower():
            return gzip.compress(body, compresslevel=1), True
        return body, False
