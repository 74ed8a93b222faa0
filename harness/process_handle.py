"""One child process seen from its parent: pid, finished(timeout), returncode.

`harness.load.locust_process.LocustProcess` (a local Locust) and
`harness.stack.compose.ComposeLocust` (Locust under docker compose) both derive from
`ProcessHandle`, so the runner waits on either the same way. Before `start()` there
is no process: `pid` and `returncode` are None and `finished()` is True (nothing to
wait for).

`ProcessGuard` is what such a handle needs of a run's guard
(`harness.stack.lifeline.RunGuard`): the processes it starts are entered on the
run's lease, so a run that dies does not leave them behind.

`pid_alive`, `pid_stopped`, `group_members` and `group_alive` read processes from
/proc (Linux; `proc_stat_fields` is the one parser of /proc/PID/stat) and nothing
else, so a Locust process that only checks its stack's supervisor imports no client
library for it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Protocol


class ProcessGuard(Protocol):
    def add_process(self, pid: int, name: str) -> None: ...

    def remove_process(self, pid: int) -> None: ...


class ChildProcess(Protocol):
    """What a handle needs of its process: a `subprocess.Popen`, or a Locust run forked
    by the fork server (`harness.load.forkserver.ForkedChild`)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class ProcessHandle:
    """The parent's view of one started subprocess (None until started)."""

    def __init__(self) -> None:
        self._process: ChildProcess | None = None

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


def proc_stat_fields(pid: int | str) -> list[str] | None:
    """/proc/PID/stat after the command name, or None when there is no such process:
    [0] is the state letter (R, S, T, Z, ...), [2] the process group, [19] the start
    time in clock ticks since boot. (The name is cut off first: it may hold spaces.)"""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _proc_state(pid: int) -> str | None:
    fields = proc_stat_fields(pid)
    return fields[0] if fields else None


def pid_alive(pid: int) -> bool:
    """True when pid exists and is not a zombie."""
    state = _proc_state(pid)
    return state is not None and state not in ("Z", "X")


def child_pids(pid: int) -> list[int]:
    """The live (non-zombie) children of pid, read from /proc (field [1] of stat is the
    parent's pid), in rising order."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = proc_stat_fields(entry.name)
            if fields is not None and len(fields) > 1 and fields[1] == str(pid) and fields[0] not in ("Z", "X"):
                children.append(int(entry.name))
    return sorted(children)


def pid_stopped(pid: int) -> bool:
    """True when pid is stopped by a signal (SIGSTOP)."""
    return _proc_state(pid) in ("T", "t")


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, read from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = proc_stat_fields(entry)
        if fields and fields[0] not in ("Z", "X") and fields[2] == str(pgid):
            members.append(int(entry))
    return members


def group_alive(pgid: int) -> bool:
    """True while a process group has a live member (a group of zombies counts as gone)."""
    return bool(group_members(pgid))
