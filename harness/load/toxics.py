"""Which requests met a toxic: a per-process watch of the app's Toxiproxy proxy.

Toxiproxy decides a toxic per connection, at the moment the connection is opened.
With a fresh connection per request, a request "went out while a toxic was
active" when the `app` proxy had a toxic (or was disabled) as its connection
opened. The watch polls the Toxiproxy API (`HARNESS_TOXIPROXY_URL`) a few times a
second, so a request within one poll interval of a window's edge may be
misattributed; toxicity below 1 means a hit connection was only *exposed* to the
toxic. With kept-alive connections the opening moment is unknown: `None`.
"""

from __future__ import annotations

import gevent
import requests

POLL_INTERVAL = 0.2
APP_PROXY = "app"


class ToxicWatch:
    """Polls `GET /proxies` and remembers whether the app proxy is faulted right now."""

    def __init__(self, api_url: str, *, proxy: str = APP_PROXY, interval: float = POLL_INTERVAL) -> None:
        self.api_url = api_url.rstrip("/")
        self.proxy = proxy
        self.interval = interval
        self.faulted: bool | None = None  # None until the first answer, or after an error
        self._session = requests.Session()
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self.poll()
            self._greenlet = gevent.spawn(self._poll_forever)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
        self._session.close()

    def poll(self) -> None:
        try:
            response = self._session.get(f"{self.api_url}/proxies", timeout=1.0)
            response.raise_for_status()
            proxy = response.json().get(self.proxy)
        except (requests.RequestException, ValueError, AttributeError):
            self.faulted = None  # unknown beats a wrong "no toxic"
            return
        if not isinstance(proxy, dict):
            self.faulted = None
            return
        self.faulted = bool(proxy.get("toxics")) or not proxy.get("enabled", True)

    def _poll_forever(self) -> None:
        while True:
            gevent.sleep(self.interval)
            self.poll()
