"""The processes of a local stack: how each is started, stopped and checked.

A `ServiceSpec` is a pure description (argv, environment, port, health check); a
`Service` is one running incarnation of it. Every service runs in its own process
group (so a signal reaches gunicorn's workers too) and carries a parent-death signal
(so nothing outlives the supervisor that started it). A service whose port another
process holds (before its start, or by the time its process gave up) raises
`PortInUse`, naming the port; what to do about it is the supervisor's call.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import redis
import requests

from harness.ports import bindable
from harness.process_handle import group_alive, pid_alive, pid_stopped
from harness.stack.info import ServiceInfo

PR_SET_PDEATHSIG = 1
HOST = "127.0.0.1"
STACK_MARKER_VAR = "HARNESS_STACK_ROOT"


class ServiceError(Exception):
    """A service could not be started, stopped or signalled."""


class PortInUse(ServiceError):
    """A service's port is bound by another process: before its start, or its process
    exited while another one held the port (it lost the bind)."""

    def __init__(self, service: str, port: int) -> None:
        super().__init__(f"{service}: port {port} is already in use by another process "
                         f"(`ss -ltnp 'sport = :{port}'` names it)")
        self.service = service
        self.port = port


def set_parent_death_signal(signum: int) -> None:
    """Ask Linux to send `signum` to this process when its parent thread exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def _child_setup(parent_pid: int, signum: int) -> Callable[[], None]:
    def setup() -> None:
        set_parent_death_signal(signum)
        # The parent may have died between fork and prctl: then nobody would signal us.
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signum)

    return setup


def spawn(argv: list[str], *, env: Mapping[str, str], log_path: Path,
          death_signal: int = signal.SIGKILL, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start argv in a new session (its own process group) with a parent-death signal."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=str(cwd) if cwd else None, start_new_session=True,
            preexec_fn=_child_setup(os.getpid(), death_signal),
        )


def signal_group(pgid: int, signum: int) -> bool:
    """Signal a whole process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


def process_marked(pid: int, root: str) -> bool:
    """True when pid's environment names this stack root (see STACK_MARKER_VAR)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"{STACK_MARKER_VAR}={root}".encode() in environ


def marked_processes(root: str) -> list[int]:
    """Live processes whose environment names this stack root."""
    return [int(entry) for entry in os.listdir("/proc")
            if entry.isdigit() and int(entry) != os.getpid()
            and pid_alive(int(entry)) and process_marked(int(entry), root)]


def port_listening(port: int, host: str = HOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.3):
            return True
    except OSError:
        return False


def tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""


# Health checks: each takes the spec and returns True when the service works.

def redis_healthy(port: int) -> bool:
    client = redis.Redis(host=HOST, port=port, socket_timeout=1.0, socket_connect_timeout=1.0)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def http_healthy(url: str) -> bool:
    try:
        return requests.get(url, timeout=2.0).status_code == 200
    except requests.RequestException:
        return False


@dataclass(frozen=True)
class ServiceSpec:
    """How to run one service. `check` answers health for a running incarnation."""

    name: str
    argv: list[str]
    env: Mapping[str, str]
    log_path: Path
    port: int | None
    check: Callable[[], bool]
    # A service without a port of its own (a consumer) counts as healthy once it has
    # stayed up this long: long enough for a bad configuration to crash it.
    min_uptime: float = 0.0
    cwd: Path | None = None  # None: the starter's working directory


@dataclass
class Service:
    """One service the supervisor owns, with its current process (None when down)."""

    spec: ServiceSpec
    process: subprocess.Popen[bytes] | None = None
    status: str = "stopped"  # running | paused | killed | stopped
    started_at: float = 0.0

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def running(self) -> bool:
        if self.process is None:
            return False
        return self.process.poll() is None

    def start(self) -> None:
        if self.running():
            raise ServiceError(f"{self.spec.name} is already running (pid {self.pid})")
        # A bind test, not a connect: a socket bound without listening (a neighbour's
        # port picker) stops the service's bind too; the supervisor's own hold does not.
        if self.spec.port is not None and not bindable(self.spec.port, HOST):
            raise PortInUse(self.spec.name, self.spec.port)
        self.process = spawn(self.spec.argv, env=self.spec.env, log_path=self.spec.log_path, cwd=self.spec.cwd)
        self.started_at = time.monotonic()
        self.status = "running"

    def healthy(self) -> bool:
        if not self.running() or self.process is None or pid_stopped(self.process.pid):
            return False
        if time.monotonic() - self.started_at < self.spec.min_uptime:
            return False
        return self.spec.check()

    def wait_healthy(self, timeout: float, interval: float = 0.05) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                if self.spec.port is not None and not bindable(self.spec.port, HOST):
                    # Free at start(), taken by someone else before the child bound it.
                    raise PortInUse(self.spec.name, self.spec.port)
                raise ServiceError(
                    f"{self.spec.name} exited with code {self.process.returncode if self.process else '?'}"
                    f"; end of {self.spec.log_path}:\n{tail(self.spec.log_path)}")
            if self.healthy():
                return
            time.sleep(interval)
        raise ServiceError(
            f"{self.spec.name} not healthy after {timeout:.0f}s; end of {self.spec.log_path}:\n"
            f"{tail(self.spec.log_path)}")

    def kill(self) -> None:
        """SIGKILL the whole group; the service stays down."""
        if self.process is None:
            return
        signal_group(self.process.pid, signal.SIGKILL)
        self._reap(timeout=5.0)
        self.status = "killed"

    def pause(self) -> None:
        self._require_running()
        assert self.process is not None
        signal_group(self.process.pid, signal.SIGSTOP)
        self.status = "paused"

    def resume(self) -> None:
        self._require_running()
        assert self.process is not None
        signal_group(self.process.pid, signal.SIGCONT)
        self.status = "running"

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM the group (continued first, in case it is paused), then SIGKILL."""
        self.request_stop()
        self.finish_stop(timeout)

    def request_stop(self) -> None:
        """The first half of `stop`: ask the group to end, without waiting for it, so
        that several services can wind down at the same time."""
        if self.process is not None and self.process.poll() is None:
            signal_group(self.process.pid, signal.SIGCONT)
            signal_group(self.process.pid, signal.SIGTERM)

    def finish_stop(self, timeout: float = 5.0) -> None:
        """The second half of `stop`: wait up to `timeout` for the process, then SIGKILL
        whatever is left of its group (e.g. gunicorn workers)."""
        if self.process is None:
            self.status = "stopped"
            return
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass  # the SIGKILL below ends it
        signal_group(self.process.pid, signal.SIGKILL)
        self._reap(timeout=timeout)
        self.status = "stopped"

    def wait_port_closed(self, timeout: float, interval: float = 0.05) -> None:
        """Return once nothing listens on the service's port any more (its processes
        stopped: the last of them may still be closing its socket); ServiceError after
        `timeout`. A no-op for a service without a port."""
        if self.spec.port is None:
            return
        deadline = time.monotonic() + timeout
        while port_listening(self.spec.port):
            if time.monotonic() >= deadline:
                raise ServiceError(f"{self.spec.name}: port {self.spec.port} still in use {timeout:g} s "
                                   "after its processes were stopped")
            time.sleep(interval)

    def _reap(self, timeout: float) -> None:
        assert self.process is not None
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ServiceError(f"{self.spec.name} (pid {self.process.pid}) did not exit") from None
        pgid = self.process.pid
        deadline = time.monotonic() + timeout
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.02)

    def _require_running(self) -> None:
        if not self.running():
            raise ServiceError(f"{self.spec.name} is not running")

    def describe(self) -> ServiceInfo:
        """This service as state.json's `services` records it."""
        return ServiceInfo(name=self.spec.name, pid=self.pid if self.running() else None,
                           port=self.spec.port, log=str(self.spec.log_path), status=self.status)


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]
