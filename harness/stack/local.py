"""The stack (Jepsen's db): Redis, Toxiproxy, the app and its consumers.

`start_stack(settings)` starts a supervisor process (`harness.stack.supervisor`) that owns
every service and keeps running after the caller returns; `open_stack(root)` attaches
to one from its state file. Both return a `harness.stack.protocol.Stack`: a
`RunningStack` here, or a `harness.stack.compose.ComposeStack` when the settings (or
the state file) say compose; this module is the one place that picks between them.
Process faults go to the supervisor over its control socket, because only it can
wait on its children.

Every stack is entered in the registry (`harness.stack.registry`) before it starts and
leaves it when it stops, so `harness status --all` / `down --all` find them all. Its
owner is `up` (outlives the command), `run` or `foreground` (dies with the process
that started it: pass that process's `Lifeline`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

from harness.nemesis.stack_proxies import FaultRecorder, StackNemesis, stack_nemesis
from harness.process_handle import pid_alive
from harness.stack import control, registry
from harness.stack import services as svc
from harness.stack.compose import ComposeStack, start_compose_stack
from harness.stack.info import (
    STATE_FILE,
    StackAlreadyRunning,
    StackError,
    StackInfo,
    control_socket_path,
    current_info,
    read_info,
    remove_state,
)
from harness.stack.private_files import private_dir
from harness.stack.protocol import ServiceStatus, Stack
from harness.stack.settings import (
    DEFAULT_APP_ENV,
    OWNERS,
    SETTINGS_FILE,
    StackSettings,
    read_settings,
    secret_environment,
    target_app_env,
    write_settings,
)

# Re-exported: callers import the stack's names from here.
__all__ = [
    "DEFAULT_APP_ENV", "OWNERS", "SETTINGS_FILE", "STATE_FILE", "RunningStack", "Stack",
    "StackAlreadyRunning", "StackError", "StackInfo", "StackSettings", "control_socket_path", "open_stack",
    "read_info", "read_settings", "remove_state", "start_stack", "target_app_env", "write_settings",
]

SUPERVISOR_LOG: Final = "supervisor.log"


class HasReadFd(Protocol):
    """The owner's end of a lifeline (`harness.stack.lifeline.Lifeline`)."""

    @property
    def read_fd(self) -> int: ...


def _is_supervisor(pid: object, root: Path) -> bool:
    if not isinstance(pid, int) or not pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"harness.stack.supervisor" in cmdline and str(root).encode() in cmdline


# --- the handle -----------------------------------------------------------------

class RunningStack:
    """A local stack run by a supervisor (a `Stack`); also a context manager that stops it."""

    def __init__(self, root: Path, info: StackInfo,
                 process: subprocess.Popen[bytes] | None = None, request_timeout: float = 120.0) -> None:
        self.root = root
        self._info = info
        self._process = process  # set when this process started the supervisor
        self.request_timeout = request_timeout

    @property
    def info(self) -> StackInfo:
        """The state file as it is now (pids change after restarts); the last good one
        while the supervisor is between writes or already gone."""
        self._info = current_info(self.root, last=self._info)
        return self._info

    def __enter__(self) -> RunningStack:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.down()

    # process faults and health go through the supervisor

    def _request(self, action: str, service: str | None = None) -> dict[str, Any]:
        return control.request(self.root, action, service, timeout=self.request_timeout)

    def kill(self, service: str) -> None:
        self._request("kill", service)

    def start(self, service: str) -> None:
        self._request("start", service)

    def pause(self, service: str) -> None:
        self._request("pause", service)

    def resume(self, service: str) -> None:
        self._request("resume", service)

    def restart(self, service: str) -> None:
        self._request("restart", service)

    def restart_services(self, env: Mapping[str, str], *, app_workers: int | None = None,
                         flush_data: bool = False) -> None:
        """Restart the app and the consumers with `env` (their TARGET_APP_* settings,
        in place of the stack's) and `app_workers` (None: as they were), every crash
        point disarmed, Redis emptied first with `flush_data`; the supervisor, Redis,
        Toxiproxy, the proxies, the ports and the secrets stay. Returns once they are
        healthy; a StackError says what failed (the stack may then be without its app:
        stop it). Local stacks only (a compose stack's containers are docker's)."""
        fields: dict[str, Any] = {"env": dict(env), "app_workers": app_workers, "flush_data": flush_data}
        control.request(self.root, "restart_services", timeout=self.request_timeout, fields=fields)

    def services(self) -> list[ServiceStatus]:
        """One row per service: name, pid, port, log, status, healthy."""
        rows: list[ServiceStatus] = []
        for row in self._request("status")["services"]:
            rows.append(ServiceStatus(name=str(row["name"]), pid=row.get("pid"), port=row.get("port"),
                                      log=row.get("log"), status=str(row.get("status")),
                                      healthy=bool(row.get("healthy")), restarts=row.get("restarts")))
        if not any(row["name"] == "toxiproxy" for row in rows):
            url = self.info.toxiproxy_url
            rows.append(ServiceStatus(name="toxiproxy", pid=None, port=None, log=None, status="external",
                                      healthy=svc.http_healthy(f"{url}/version"), restarts=None))
        return rows

    def health(self) -> dict[str, bool]:
        return {row["name"]: row["healthy"] for row in self.services()}

    def nemesis(self, recorder: FaultRecorder | None = None) -> StackNemesis:
        """A `StackNemesis`: this stack's proxies by their plain names (app, redis)."""
        return stack_nemesis(self.info, recorder)

    def down(self, timeout: float = 30.0) -> None:
        """Stop the supervisor and wait until no service process or port is left.

        Raises StackError naming what is left: a process, a port, or a proxy this
        stack created on a shared Toxiproxy that neither the supervisor nor the
        reclaim after it could delete (its lease stays, the next `up`/`down` retries).
        """
        info = self.info  # the latest: a restart moves pids
        pid = info.supervisor_pid
        if pid is not None and pid_alive(pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass  # it exited between the check and the signal: what we want
        deadline = time.monotonic() + timeout
        while pid is not None and pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._process is not None:
            try:
                self._process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass  # reported below: the pid is still alive
        leftovers = _kill_leftovers(info, deadline)
        remove_state(self.root)
        registry.unregister_stack(self.root)
        _reclaim_quietly(info.toxiproxy_url)
        if pid is not None and pid_alive(pid):
            raise StackError(f"the stack supervisor (pid {pid}) did not stop within {timeout:.0f}s")
        leftovers += kept_proxies(self.root)
        if leftovers:
            raise StackError(f"still there after down: {', '.join(leftovers)}")


def kept_proxies(root: Path) -> list[str]:
    """The proxies a stack in root created on a shared Toxiproxy and could not delete
    (still in its lease once its supervisor is gone); see the supervisor's log."""
    left: list[str] = []
    for _, lease in registry.leases():
        if lease.kind != "stack" or lease.root != str(root):
            continue
        left += [f"proxy {claim.name} on {lease.toxiproxy_url} (see logs/{SUPERVISOR_LOG})"
                 for claim in lease.proxies]
    return left


def _kill_leftovers(info: StackInfo, deadline: float) -> list[str]:
    """SIGKILL any process of this stack that survived its supervisor; name what is left.

    A process belongs to the stack when its environment carries the stack's marker,
    so a recorded pid since reused by an unrelated process is never signalled.
    """
    root = info.root
    for pid in svc.marked_processes(root):
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it died on its own meanwhile
    ports = [service.port for service in info.services if service.port]
    ports += [_url_port(url) for url in (info.app_url, info.redis_proxy_url) if url]
    left: list[str] = []
    while time.monotonic() < deadline:
        left = [f"pid {pid}" for pid in svc.marked_processes(root)]
        left += [f"port {port}" for port in ports if svc.port_listening(port)]
        if not left:
            break
        time.sleep(0.05)
    return left


def _reclaim_quietly(toxiproxy_url: str | None) -> None:
    """Heal the leftovers of dead owners on this Toxiproxy; a failure here never fails
    the command that merely passes by (the lease stays for the next one)."""
    if not toxiproxy_url:
        return
    for line in registry.reclaim(toxiproxy_url):
        print(f"harness: reclaimed: {line}", file=sys.stderr)


def _url_port(url: str) -> int:
    return int(urlsplit(url).port or 0)


# --- starting and attaching -------------------------------------------------------

def start_stack(settings: StackSettings, *, lifeline: HasReadFd | None = None) -> Stack:
    """Start the stack settings describe and wait until every service is healthy.

    A local stack gets a supervisor; with a `harness.stack.lifeline.Lifeline`
    (required for owners other than `up`), the supervisor stops as soon as this
    process dies, however it dies. `settings.compose` starts the compose stack.
    """
    if settings.compose:
        return start_compose_stack(settings)
    return start_local_stack(settings, lifeline=lifeline)


def start_local_stack(settings: StackSettings, *, lifeline: HasReadFd | None = None) -> RunningStack:
    if settings.owner != "up" and lifeline is None:
        raise StackError(f"a stack owned by {settings.owner!r} needs its owner's lifeline")
    root = settings.root.resolve()
    settings = replace(settings, root=root)
    running = open_stack(root)
    if running is not None:
        raise StackAlreadyRunning(f"a stack is already running in {root} (app_url {running.info.app_url})")
    _reclaim_quietly(settings.toxiproxy_url)
    private_dir(root)  # 0700: state.json and the logs inside are the owner's only
    (root / "logs").mkdir(parents=True, exist_ok=True)
    write_settings(settings)
    log_path = root / "logs" / SUPERVISOR_LOG
    env = dict(os.environ)
    env.update(secret_environment(settings))  # kept out of stack-settings.json
    env[svc.STACK_MARKER_VAR] = str(root)
    env[registry.REGISTRY_ENV] = str(registry.registry_dir())  # the supervisor unregisters itself
    argv = [sys.executable, "-m", "harness.stack.supervisor", "--root", str(root)]
    pass_fds: tuple[int, ...] = ()
    if lifeline is not None:
        argv += ["--lifeline-fd", str(lifeline.read_fd)]
        pass_fds = (lifeline.read_fd,)
    registry.register_stack(root, owner=settings.owner, mode="local")
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, env=env,
            start_new_session=True, pass_fds=pass_fds,
            # Until it reports ready, the supervisor goes down with us (Ctrl-C, kill -9);
            # a stack owned by a run keeps that signal for good.
            preexec_fn=svc._child_setup(os.getpid(), signal.SIGTERM),
        )
    try:
        report = _read_report(process, timeout=settings.health_timeout * 3 + 15)
    except BaseException:
        _stop_supervisor(process)
        registry.unregister_stack(root)
        raise
    if not report.get("ok"):
        _stop_supervisor(process)
        registry.unregister_stack(root)
        message = str(report.get("error") or "the stack did not start")
        if "\n" not in message:  # no service log attached: show the supervisor's own
            message += f"; end of {log_path}:\n{svc.tail(log_path)}"
        raise StackError(message)
    try:
        info = read_info(root)
    except StackError:
        _stop_supervisor(process)
        raise
    if info is None:
        _stop_supervisor(process)
        raise StackError(f"the supervisor reported ready but wrote no {root / STATE_FILE}")
    return RunningStack(root, info, process=process)


def _read_report(process: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    data = b""
    fd = process.stdout.fileno()
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return {"ok": False, "error": f"the stack did not become healthy within {timeout:.0f}s"}
        readable, _, _ = select.select([fd], [], [], min(remaining, 0.5))
        if not readable:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            return {"ok": False, "error": "the stack supervisor exited before it was ready"}
        data += chunk
    process.stdout.close()
    try:
        report = json.loads(data)
    except ValueError:
        report = None
    if not isinstance(report, dict):
        return {"ok": False, "error": f"the stack supervisor said {data[:200]!r}"}
    return report


def _stop_supervisor(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            svc.signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
    if process.stdout is not None and not process.stdout.closed:
        process.stdout.close()


def open_stack(root: Path, *, reclaim: bool = True) -> Stack | None:
    """The stack running in root, or None; a state file whose supervisor is gone is removed.

    With `reclaim`, leftovers of dead owners on the stack's Toxiproxy are healed on the way.
    A state file that is not this harness's is a StackError naming the file and the field.
    """
    root = Path(root).resolve()
    info = read_info(root)
    if info is None:
        return None
    if info.mode == "compose":
        return ComposeStack(root, info)
    if not _is_supervisor(info.supervisor_pid, root):
        _kill_leftovers(info, time.monotonic() + 5.0)
        remove_state(root)
        registry.unregister_stack(root)
        if reclaim:
            _reclaim_quietly(info.toxiproxy_url)
        return None
    if reclaim:
        _reclaim_quietly(info.toxiproxy_url)
    return RunningStack(root, info)


def _protocol_check(local: RunningStack, compose: ComposeStack) -> tuple[Stack, Stack]:
    """Never called: mypy checks here that both handles implement `Stack`."""
    return local, compose
