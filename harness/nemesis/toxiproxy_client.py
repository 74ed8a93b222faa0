"""Network faults through the Toxiproxy API (the embedded server or the real one).

A typed layer over toxiproxy-python (`Nemesis`). Every fault is checked after it is
applied (a fault that silently did not apply is the worst bug a chaos tool can
have): any failure to apply or to verify raises a `NemesisError`, one subclass per
cause (unreachable, not found, conflict, invalid input, not as requested).

Every heal is checked as well, and no failure to heal is dropped: `remove_toxic`,
`enable_proxy` and `reset` raise when the fault is still there afterwards. When a
toxic comes out wrong and taking it back fails too, `add_toxic` raises
`NemesisHealError`: its `failures` (`HealFailure`: what, error) say which fault may
still be on. A heal of several faults (a scoped reset, harness.nemesis.stack_proxies)
goes on with the others after one fails and raises one `NemesisHealError` listing
every failure at the end. The one failure that counts as healed is "not found" when
removing a toxic inside `Nemesis.toxic()`: the toxic is gone, which is what the heal
wanted.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import requests
from toxiproxy import Proxy, Toxiproxy
from toxiproxy.api import APIConsumer
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from harness.errors import HarnessError
from harness.toxiproxy.toxics import TOXIC_ATTRIBUTES

STREAMS = ("upstream", "downstream")


class NemesisError(HarnessError):
    """Root: a fault could not be applied, verified or healed."""


class NemesisUnreachable(NemesisError):
    """The Toxiproxy API did not answer."""


class NemesisNotFound(NemesisError):
    """Unknown proxy or toxic."""


class NemesisConflict(NemesisError):
    """The proxy or toxic already exists."""


class NemesisInvalid(NemesisError):
    """Bad toxic type, stream, attribute or toxicity (checked before sending)."""


class NemesisVerifyError(NemesisError):
    """The API accepted the call but the server state does not show the fault."""


@dataclass(frozen=True)
class HealFailure:
    """One fault that could not be healed: what it was, and why."""

    what: str  # e.g. "toxic plan_w0 on app", "proxy redis"
    error: str


class NemesisHealError(NemesisError):
    """One or more faults could not be healed and may still be active."""

    def __init__(self, failures: Sequence[HealFailure], context: str = "") -> None:
        self.failures = tuple(failures)
        listed = "; ".join(f"{failure.what}: {failure.error}" for failure in self.failures)
        super().__init__(f"{context}{': ' if context else ''}could not heal {listed}")


@dataclass(frozen=True)
class ProxyInfo:
    name: str
    listen: str
    upstream: str
    enabled: bool


@dataclass(frozen=True)
class ToxicInfo:
    proxy: str
    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int] = field(default_factory=dict)


def validate_toxic(
    toxic_type: str, stream: str, attributes: dict[str, Any] | None, toxicity: float | None
) -> tuple[str, dict[str, int]]:
    """Check a toxic before sending it; returns (stream lowercased, attributes).
    Messages are one line, fit for a CLI."""
    if not isinstance(toxic_type, str) or toxic_type not in TOXIC_ATTRIBUTES:
        known = ", ".join(sorted(TOXIC_ATTRIBUTES))
        raise NemesisInvalid(f"unknown toxic type {toxic_type!r} (known: {known})")
    if not isinstance(stream, str) or stream.lower() not in STREAMS:
        raise NemesisInvalid(f"stream must be upstream or downstream, not {stream!r}")
    allowed = TOXIC_ATTRIBUTES[toxic_type]
    checked: dict[str, int] = {}
    for key, value in (attributes or {}).items():
        if key not in allowed:
            names = ", ".join(allowed) or "none"
            raise NemesisInvalid(f"{toxic_type} has no attribute {key!r} (attributes: {names})")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise NemesisInvalid(f"{toxic_type}.{key} must be a non-negative integer, not {value!r}")
        checked[key] = value
    if toxicity is not None:
        if isinstance(toxicity, bool) or not isinstance(toxicity, (int, float)) or not 0.0 <= toxicity <= 1.0:
            raise NemesisInvalid(f"toxicity must be a number between 0 and 1, not {toxicity!r}")
    return stream.lower(), checked


def _message(exc: Exception) -> str:
    """The server's error message from a toxiproxy-python exception (it carries the body)."""
    raw = exc.args[0] if exc.args else b""
    try:
        return str(json.loads(raw)["error"])
    except (ValueError, KeyError, TypeError):
        return raw.decode(errors="replace").strip() if isinstance(raw, bytes) else str(raw)


class Nemesis:
    """Apply and heal network faults through one Toxiproxy API."""

    # toxiproxy-python keeps the API address in class attributes; calls from
    # several threads (or two Nemesis objects) must not interleave.
    _client_lock = threading.Lock()

    def __init__(self, api_url: str, *, timeout: float = 5.0) -> None:
        parts = urlsplit(api_url if "://" in api_url else f"http://{api_url}")
        if not parts.hostname or not parts.port:
            raise NemesisInvalid(f"toxiproxy url needs a host and a port: {api_url!r}")
        self.api_url = f"http://{parts.hostname}:{parts.port}"
        self._host = parts.hostname
        self._port = parts.port
        self._timeout = timeout

    # -- plumbing -------------------------------------------------------------
    @contextmanager
    def _client(self, what: str) -> Iterator[Toxiproxy]:
        with self._client_lock:
            APIConsumer.host = self._host
            APIConsumer.port = self._port
            try:
                yield Toxiproxy()
            except NotFound as exc:
                raise NemesisNotFound(f"{what}: {_message(exc)}") from None
            except ProxyExists as exc:
                raise NemesisConflict(f"{what}: {_message(exc)}") from None
            except InvalidToxic as exc:
                raise NemesisInvalid(f"{what}: {_message(exc)}") from None
            except requests.exceptions.JSONDecodeError as exc:
                raise NemesisError(f"{what}: unexpected answer from toxiproxy: {exc}") from None
            except requests.RequestException as exc:
                raise NemesisUnreachable(f"{what}: toxiproxy at {self.api_url} unreachable: {exc}") from None
            except (ValueError, KeyError, TypeError) as exc:
                # toxiproxy-python parses every answer; a 500 or garbage ends up here.
                raise NemesisError(f"{what}: unexpected answer from toxiproxy: {exc}") from None

    def _request(self, method: str, path: str, what: str, body: Any = None) -> Any:
        """One plain HTTP call, for what toxiproxy-python cannot do."""
        try:
            response = requests.request(method, self.api_url + path, json=body, timeout=self._timeout)
        except requests.RequestException as exc:
            raise NemesisUnreachable(f"{what}: toxiproxy at {self.api_url} unreachable: {exc}") from None
        if response.status_code >= 400:
            try:
                message = response.json()["error"]
            except (ValueError, KeyError, TypeError):
                message = response.text.strip() or f"HTTP {response.status_code}"
            error = {404: NemesisNotFound, 409: NemesisConflict, 400: NemesisInvalid}.get(response.status_code, NemesisError)
            raise error(f"{what}: {message}")
        try:
            return response.json() if response.content else None
        except ValueError as exc:
            raise NemesisError(f"{what}: unexpected answer from toxiproxy: {exc}") from None

    @staticmethod
    def _proxy_handle(name: str) -> Proxy:
        # The client's Proxy only needs the name to address the API.
        return Proxy(name=name, upstream="", enabled=True, listen="")

    @staticmethod
    def _toxic_info(proxy: str, raw: dict[str, Any]) -> ToxicInfo:
        return ToxicInfo(
            proxy=proxy,
            name=str(raw["name"]),
            type=str(raw["type"]),
            stream=str(raw["stream"]),
            toxicity=float(raw["toxicity"]),
            attributes=dict(raw.get("attributes") or {}),
        )

    def _toxics_of(self, proxy: str) -> list[ToxicInfo]:
        raw = self._request("GET", f"/proxies/{quote(proxy, safe='')}/toxics", f"list toxics of {proxy}")
        return [self._toxic_info(proxy, item) for item in raw]

    # -- proxies --------------------------------------------------------------------
    def proxies(self) -> dict[str, ProxyInfo]:
        with self._client("list proxies") as client:
            found = client.proxies()
        return {
            name: ProxyInfo(name=p.name, listen=p.listen, upstream=p.upstream, enabled=bool(p.enabled))
            for name, p in found.items()
        }

    def ensure_proxy(self, name: str, listen: str, upstream: str) -> ProxyInfo:
        """The proxy exists, listens where asked, forwards to upstream and is enabled."""
        existing = self.proxies().get(name)
        if existing is not None and not (_same_listen(existing.listen, listen) and existing.upstream == upstream):
            with self._client(f"replace proxy {name}"):
                self._proxy_handle(name).destroy()
            existing = None
        if existing is None:
            # Plain HTTP: toxiproxy-python drops the server's message on a 500
            # (e.g. "address already in use"), which is the one a user needs.
            body = {"name": name, "listen": listen, "upstream": upstream, "enabled": True}
            self._request("POST", "/proxies", f"create proxy {name}", body)
        elif not existing.enabled:
            self.enable_proxy(name)
        info = self.proxies().get(name)
        if info is None or not info.enabled or info.upstream != upstream or not _same_listen(info.listen, listen):
            raise NemesisVerifyError(f"proxy {name} is not as requested after ensure: {info}")
        return info

    def _set_enabled(self, name: str, enabled: bool) -> None:
        action = "enable" if enabled else "disable"
        with self._client(f"{action} proxy {name}"):
            handle = self._proxy_handle(name)
            handle.enable() if enabled else handle.disable()
        info = self.proxies().get(name)
        if info is None or info.enabled != enabled:
            raise NemesisVerifyError(f"proxy {name} did not {action}: {info}")

    def disable_proxy(self, name: str) -> None:
        """Close the proxy's listener and cut its connections."""
        self._set_enabled(name, False)

    def enable_proxy(self, name: str) -> None:
        self._set_enabled(name, True)

    def reset(self) -> None:
        """Enable every proxy and remove every toxic, then check that it happened."""
        with self._client("reset") as client:
            if not client.reset():
                raise NemesisError("reset: toxiproxy refused the reset")
        failures = self.faults_left()
        if failures:
            raise NemesisHealError(failures, "reset")

    def faults_left(self, proxies: set[str] | None = None) -> list[HealFailure]:
        """What a reset left on, read back (of `proxies` only, when given): disabled
        proxies and toxics, each as the failure a reset reports."""
        def ours(name: str) -> bool:
            return proxies is None or name in proxies
        failures = [HealFailure(f"proxy {name} (disabled)", "still disabled after the reset")
                    for name, info in self.proxies().items() if ours(name) and not info.enabled]
        failures += [HealFailure(f"toxic {toxic.name} on {toxic.proxy}", "still there after the reset")
                     for toxic in self.list_toxics() if ours(toxic.proxy)]
        return failures

    # -- toxics -----------------------------------------------------------------------
    def list_toxics(self) -> list[ToxicInfo]:
        """Every toxic of every proxy, from one consistent snapshot (GET /proxies
        carries the toxics; toxiproxy-python's Proxy objects drop them)."""
        raw = self._request("GET", "/proxies", "list toxics")
        if not isinstance(raw, dict):
            raise NemesisError(f"list toxics: unexpected answer from toxiproxy: {raw!r}")
        return [
            self._toxic_info(name, toxic)
            for name in sorted(raw)
            for toxic in (raw[name].get("toxics") or [])
        ]

    def add_toxic(
        self,
        proxy: str,
        type: str,  # noqa: A002 - the API's own word
        *,
        stream: str = "downstream",
        attributes: dict[str, int] | None = None,
        toxicity: float = 1.0,
        name: str | None = None,
    ) -> ToxicInfo:
        stream, checked = validate_toxic(type, stream, attributes, toxicity)
        toxic_name = name or f"{type}_{stream}"
        with self._client(f"add toxic {toxic_name} to {proxy}"):
            self._proxy_handle(proxy).add_toxic(
                type=type, stream=stream, name=toxic_name, toxicity=float(toxicity), attributes=checked
            )
        found = {t.name: t for t in self._toxics_of(proxy)}.get(toxic_name)
        if (
            found is None
            or found.type != type
            or found.stream.lower() != stream
            or abs(found.toxicity - float(toxicity)) > 1e-6
            or any(found.attributes.get(key) != value for key, value in checked.items())
        ):
            wrong = f"toxic {toxic_name} on {proxy} is not as requested after adding: {found}"
            if found is not None:
                # Not the fault that was asked for: take it away rather than leave it on.
                try:
                    self.remove_toxic(proxy, toxic_name)
                except NemesisError as error:
                    raise NemesisHealError([HealFailure(f"toxic {toxic_name} on {proxy}", str(error))],
                                           wrong) from error
            raise NemesisVerifyError(wrong)
        return found

    def update_toxic(
        self,
        proxy: str,
        name: str,
        *,
        attributes: dict[str, int] | None = None,
        toxicity: float | None = None,
    ) -> ToxicInfo:
        """Change a toxic in place (connections already open see it at once)."""
        path = f"/proxies/{quote(proxy, safe='')}/toxics/{quote(name, safe='')}"
        current = self._toxic_info(proxy, self._request("GET", path, f"update toxic {name} on {proxy}"))
        _, checked = validate_toxic(current.type, current.stream, attributes, toxicity)
        body: dict[str, Any] = {"attributes": checked}
        if toxicity is not None:
            body["toxicity"] = float(toxicity)
        updated = self._toxic_info(proxy, self._request("POST", path, f"update toxic {name} on {proxy}", body))
        if any(updated.attributes.get(key) != value for key, value in checked.items()) or (
            toxicity is not None and abs(updated.toxicity - float(toxicity)) > 1e-6
        ):
            raise NemesisVerifyError(f"toxic {name} on {proxy} is not as requested after updating: {updated}")
        return updated

    def remove_toxic(self, proxy: str, name: str) -> None:
        with self._client(f"remove toxic {name} from {proxy}"):
            removed = self._proxy_handle(proxy).destroy_toxic(name)
        if not removed:
            raise NemesisError(f"remove toxic {name} from {proxy}: toxiproxy refused")
        if any(toxic.name == name for toxic in self._toxics_of(proxy)):
            raise NemesisVerifyError(f"toxic {name} is still on {proxy} after removing it")

    # -- faults that heal themselves -----------------------------------------------
    @contextmanager
    def toxic(
        self,
        proxy: str,
        type: str,  # noqa: A002
        *,
        stream: str = "downstream",
        attributes: dict[str, int] | None = None,
        toxicity: float = 1.0,
        name: str | None = None,
    ) -> Iterator[ToxicInfo]:
        """A toxic for the duration of the block; removed in `finally`."""
        info = self.add_toxic(proxy, type, stream=stream, attributes=attributes, toxicity=toxicity, name=name)
        try:
            yield info
        finally:
            try:
                self.remove_toxic(proxy, info.name)
            except NemesisNotFound:
                pass  # already gone (a reset or a hand-run `fault clear`): healed anyway

    @contextmanager
    def proxy_down(self, name: str) -> Iterator[None]:
        """The proxy disabled for the duration of the block; enabled in `finally`."""
        self.disable_proxy(name)
        try:
            yield
        finally:
            self.enable_proxy(name)


def _same_listen(actual: str, wanted: str) -> bool:
    """Does a proxy listening on `actual` satisfy a request for `wanted`?
    The server reports the resolved address, so port 0 and localhost match."""
    a_host, _, a_port = actual.rpartition(":")
    w_host, _, w_port = wanted.rpartition(":")
    aliases = {"localhost": "127.0.0.1", "": "[::]", "0.0.0.0": "[::]"}
    if aliases.get(a_host, a_host) != aliases.get(w_host, w_host):
        return False
    return w_port in ("", "0") or a_port == w_port
