"""The Python side of the harness's `/harness/proxies/{name}/...` extension of
the embedded Toxiproxy (harness.toxiproxy.api): switch a proxy's protocol parsing
on or off, read the steps it saw, arm step faults and read what they did.

Contract: `ProxySteps(api_url, proxy)` talks HTTP to that server (it may run in
this process, as EmbeddedToxiproxy, or in another). Every method returns the
decoded JSON answer; a refused request raises `StepApiError` with the server's
message (a 400 for bad fields, 404 for an unknown proxy, 409 for a proxy that
does not parse).
"""

from __future__ import annotations

from typing import Any

import requests

from harness.toxiproxy.errors import ToxiproxyError

_TIMEOUT = 10.0


class StepApiError(ToxiproxyError):
    """The server refused a step request."""


class ProxySteps:
    """Steps and step faults of one proxy."""

    def __init__(self, api_url: str, proxy: str) -> None:
        self.base = f"{api_url.rstrip('/')}/harness/proxies/{proxy}"
        self.proxy = proxy

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = requests.request(method, f"{self.base}/{path}", json=body, timeout=_TIMEOUT)
        if response.status_code >= 400:
            raise StepApiError(f"{method} {path} on proxy {self.proxy}: {response.status_code} {response.text.strip()}")
        return response.json() if response.content else None

    def watch(self, protocol: str = "redis", role: str = "app") -> dict[str, Any]:
        """Parse the proxy's connections opened from now on; their sender is `role`."""
        result: dict[str, Any] = self._call("POST", "wire", {"protocol": protocol, "role": role})
        return result

    def unwatch(self) -> None:
        self._call("POST", "wire", {"protocol": None})

    def wire(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "wire")
        return result

    def steps(self) -> dict[str, int]:
        """Step identity -> how many times it was seen."""
        result: dict[str, int] = self._call("GET", "steps")["steps"]
        return result

    def reset_steps(self) -> None:
        self._call("DELETE", "steps")

    def arm(self, action: str, step: str, *, occurrence: int = 1, duration_ms: int = 0) -> dict[str, Any]:
        """A one-shot fault `action` (before, after, pause, error) at the
        `occurrence`-th step matching `step` (`*` is a wildcard)."""
        body = {"action": action, "step": step, "occurrence": occurrence, "duration_ms": duration_ms}
        result: dict[str, Any] = self._call("POST", "triggers", body)
        return result

    def triggers(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "triggers")
        return result

    def disarm(self, trigger_id: int) -> None:
        """Take back a trigger that has not fired (StepApiError 409 when it has)."""
        self._call("DELETE", f"triggers/{trigger_id}")
