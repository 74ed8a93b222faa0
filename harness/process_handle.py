"""One child process seen from its parent: pid, finished(timeout), returncode.

`harness.load.locust_process.LocustProcess` (a local Locust) and
`harness.stack.compose.ComposeLocust` (Locust under docker compose) both derive from
`ProcessHandle`, so the runner waits on either the same way. Before `start()` there
is no process: `pid` and `returncode` are None and `finished()` is True (nothing to
wait for).

`ProcessGuard` is what such a handle needs of a run's guard
(`harness.stack.lifeline.RunGuard`): the processes it starts are entered on the
run's lease, so a run that dies does not leave them behind.

`pid_alive` and `pid_stopped` read a process's state from /proc (Linux) and nothing
else, so a Locust process that only checks its stack's supervisor imports no client
library for it.
"""

from __future__ import annotations

import subprocess
from typing import Protocol


class ProcessGuard(Protocol):
    def add_process(self, pid: int, name: str) -> None: ...

    def remove_process(self, pid: int) -> None: ...


class ProcessHandle:
    """The parent's view of one started subprocess (None until started)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def finished(self, *, timeout: float) -> bool:
        """Wait up to timeout seconds; True once the process has exited (or never started)."""
        if self._process is None:
            return True
        try:
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.returncode


def _proc_state(pid: int) -> str | None:
    """The state letter of /proc/PID/stat (R, S, T, Z, ...), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """True when pid exists and is not a zombie."""
    state = _proc_state(pid)
    return state is not None and state not in ("Z", "X")


def pid_stopped(pid: int) -> bool:
    """True when pid is stopped by a signal (SIGSTOP)."""
    return _proc_state(pid) in ("T", "t")
