"""A stack's view of its Toxiproxy: its own proxies only, every change on record.

A stack names its proxies `app` and `redis` (the names plans and `harness fault` use);
on a shared Toxiproxy they carry a prefix (`--proxy-prefix ci-42-` → `ci-42-app`). The
`StackNemesis` maps the plain names to the stack's real ones; on a shared Toxiproxy
it also shows only those proxies (by their plain names) and their toxics, and its
`reset` heals only them, so neither a run nor `harness fault` touches another
team's proxies; one fault it cannot heal does not stop it healing the others, and it
raises `NemesisHealError` naming every fault still on. When a `RunGuard`
is given, every toxic added and every proxy disabled is written to the run's lease
*before* it is applied (a SIGKILL between the two leaves a harmless extra record,
never an unrecorded fault) and struck off after it is healed.

A stack's nemesis also holds its app's crash points (`crash_points`, a
`harness.nemesis.crash_points.CrashPointClient` on the app's internal listener), so
`reset` (used by `harness fault clear`, the runner before and after a run, the Chaos
tab's Heal) disarms every crash point too, after the network faults, and reports one
it cannot disarm like a toxic it cannot remove.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

from harness.nemesis.crash_points import CrashPointClient
from harness.nemesis.toxiproxy_client import (
    HealFailure,
    Nemesis,
    NemesisError,
    NemesisHealError,
    NemesisNotFound,
    ProxyInfo,
    ToxicInfo,
)


class FaultRecorder(Protocol):
    def use_toxiproxy(self, url: str, *, local: bool) -> None: ...
    def toxic_added(self, proxy: str, name: str) -> None: ...
    def toxic_removed(self, proxy: str, name: str) -> None: ...
    def proxy_disabled(self, proxy: str) -> None: ...
    def proxy_enabled(self, proxy: str) -> None: ...
    def cleared(self) -> None: ...


class StackNemesis:
    """The Nemesis calls a run makes, scoped to one stack's proxies."""

    def __init__(self, inner: Nemesis, names: Mapping[str, str] | None = None, *,
                 shared: bool = False, recorder: FaultRecorder | None = None,
                 crash_points: CrashPointClient | None = None) -> None:
        self.inner = inner
        self.names = dict(names or {})
        self.shared = shared  # False: the Toxiproxy is the stack's own, a full reset is fine
        self.recorder = recorder
        self.crash_points = crash_points  # the stack's app's; None: no app to arm

    def real(self, proxy: str) -> str:
        return self.names.get(proxy, proxy)

    def _scoped(self) -> bool:
        return self.shared and bool(self.names)

    def proxies(self) -> dict[str, ProxyInfo]:
        found = self.inner.proxies()
        if not self._scoped():
            return found
        return {plain: replace(found[real], name=plain) for plain, real in self.names.items() if real in found}

    def list_toxics(self) -> list[ToxicInfo]:
        toxics = self.inner.list_toxics()
        if not self._scoped():
            return toxics
        plain = {real: name for name, real in self.names.items()}
        return [replace(toxic, proxy=plain[toxic.proxy]) for toxic in toxics if toxic.proxy in plain]

    def add_toxic(self, proxy: str, type: str, *, stream: str = "downstream",  # noqa: A002
                  attributes: dict[str, int] | None = None, toxicity: float = 1.0,
                  name: str | None = None) -> ToxicInfo:
        real = self.real(proxy)
        toxic_name = name or f"{type}_{stream}"
        if self.recorder is not None:
            self.recorder.toxic_added(real, toxic_name)
        return self.inner.add_toxic(real, type, stream=stream, attributes=attributes,
                                    toxicity=toxicity, name=toxic_name)

    def remove_toxic(self, proxy: str, name: str) -> None:
        real = self.real(proxy)
        self.inner.remove_toxic(real, name)
        if self.recorder is not None:
            self.recorder.toxic_removed(real, name)

    def disable_proxy(self, name: str) -> None:
        if self.recorder is not None:
            self.recorder.proxy_disabled(self.real(name))
        self.inner.disable_proxy(self.real(name))

    def enable_proxy(self, name: str) -> None:
        self.inner.enable_proxy(self.real(name))
        if self.recorder is not None:
            self.recorder.proxy_enabled(self.real(name))

    def reset(self) -> None:
        """Every toxic of this stack's proxies removed and each of them enabled, then
        every crash point of its app disarmed.

        On a shared Toxiproxy each fault is healed on its own: one that fails does not
        stop the others, and `NemesisHealError` lists every one still on at the end
        (the lease keeps its records then: its janitor heals what we could not). The
        crash points are disarmed whatever the network heal did."""
        try:
            if not self._scoped():
                self.inner.reset()
            else:
                self._reset_ours(set(self.names.values()))
            if self.recorder is not None:
                self.recorder.cleared()
        except NemesisError as network_error:
            crash_error = self._disarm_crash_points()
            if crash_error is None:
                raise
            raise NemesisHealError([*_failures_of(network_error, "network faults"),
                                    *_failures_of(crash_error, "crash points")], "reset") from network_error
        crash_error = self._disarm_crash_points()
        if crash_error is not None:
            raise crash_error

    def _disarm_crash_points(self) -> NemesisError | None:
        """Every crash point of the app disarmed; the error if not (raised by the caller)."""
        if self.crash_points is None:
            return None
        try:
            self.crash_points.disarm_all()
        except NemesisError as error:
            return error
        return None

    def _reset_ours(self, ours: set[str]) -> None:
        failures: list[HealFailure] = []
        for toxic in self.inner.list_toxics():
            if toxic.proxy in ours:
                try:
                    self.inner.remove_toxic(toxic.proxy, toxic.name)
                except NemesisNotFound:
                    pass  # gone already (a concurrent heal): what the reset wants
                except NemesisError as error:
                    failures.append(HealFailure(f"toxic {toxic.name} on {toxic.proxy}", str(error)))
        for name, info in self.inner.proxies().items():
            if name in ours and not info.enabled:
                try:
                    self.inner.enable_proxy(name)
                except NemesisError as error:
                    failures.append(HealFailure(f"proxy {name} (disabled)", str(error)))
        if not failures:
            # Read back: a toxic added meanwhile, or a heal the server acknowledged
            # without doing it, is still a fault left on.
            failures = self.inner.faults_left(ours)
        if failures:
            raise NemesisHealError(failures, f"reset of {', '.join(sorted(ours))}")

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.inner, attribute)


def _failures_of(error: NemesisError, what: str) -> list[HealFailure]:
    if isinstance(error, NemesisHealError):
        return list(error.failures)
    return [HealFailure(what, str(error))]


class StackToxiproxy(Protocol):
    """What the nemesis needs of a stack's state (harness.stack.info.StackInfo has it)."""

    @property
    def toxiproxy_url(self) -> str: ...
    @property
    def toxiproxy_kind(self) -> str: ...
    @property
    def proxies(self) -> Mapping[str, str]: ...
    @property
    def app_direct_url(self) -> str: ...
    @property
    def internal_token(self) -> str: ...


def stack_nemesis(info: StackToxiproxy, recorder: FaultRecorder | None = None) -> StackNemesis:
    """The nemesis for a stack (its proxy names, whether its Toxiproxy is shared, its
    app's crash points); `info` is the stack's `StackInfo`."""
    url, kind, names = info.toxiproxy_url, info.toxiproxy_kind, info.proxies
    shared = kind == "external"
    if recorder is not None:
        # An external Toxiproxy outlives us; one the stack started dies with it.
        recorder.use_toxiproxy(url, local=kind in ("embedded", "server"))
    crash_points = CrashPointClient(info.app_direct_url, info.internal_token or None)
    return StackNemesis(Nemesis(url), names, shared=shared, recorder=recorder, crash_points=crash_points)
