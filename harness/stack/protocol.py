"""`Stack`: what the runner, the CLI and the nemesis may ask of a running stack.

Two classes implement it: `harness.stack.local.RunningStack` (a supervisor owns the
processes) and `harness.stack.compose.ComposeStack` (docker compose owns the
containers). Code that drives a stack takes a `Stack`, never one of them, so a
run, a fault or `harness down` works the same on both; mypy checks both classes
against this protocol (tests/stack/test_protocol.py).

Service actions (kill, start, pause, resume, restart) take a service name from
`info.services` and raise `StackError` when the action failed or the name is
unknown; `down()` stops everything the stack started and raises `StackError`
naming whatever it could not stop or remove.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Protocol, TypedDict

from harness.nemesis.stack_proxies import FaultRecorder, StackNemesis
from harness.stack.info import StackInfo


class ServiceStatus(TypedDict):
    """One service as `services()` reports it now (the supervisor's JSON answer, or docker's)."""

    name: str
    pid: int | None
    port: int | None
    log: str | None
    status: str  # running, paused, killed, stopped, exited, restarting; docker's words under compose
    healthy: bool
    # Automatic restarts of a service that died on its own (the local supervisor's;
    # docker's RestartCount under compose, None when docker does not say).
    restarts: int | None


class ServiceActions(Protocol):
    """The process faults a stack takes (the nemesis's `ProcessFaults` is the same shape)."""

    def kill(self, service: str) -> None: ...

    def start(self, service: str) -> None: ...

    def pause(self, service: str) -> None: ...

    def resume(self, service: str) -> None: ...

    def restart(self, service: str) -> None: ...


class Stack(ServiceActions, Protocol):
    @property
    def root(self) -> Path:
        """The stack's state directory (absolute)."""
        ...

    @property
    def info(self) -> StackInfo:
        """state.json as it is now (pids and statuses change after process faults)."""
        ...

    def services(self) -> list[ServiceStatus]: ...

    def health(self) -> dict[str, bool]: ...

    def nemesis(self, recorder: FaultRecorder | None = None) -> StackNemesis: ...

    def down(self) -> None: ...

    def __enter__(self) -> Stack: ...

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None: ...
