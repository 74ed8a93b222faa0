"""The stack (Jepsen's db): Redis, Toxiproxy, the app and its consumers.

`start_stack(settings)` starts a supervisor process (`harness.stack.supervisor`) that owns
every service and keeps running after the caller returns; `open_stack(root)` attaches
to one from its state file; `RunningStack` is the handle both return. Process faults
go to the supervisor over its control socket, because only it can wait on its
children. The compose variant (`harness.stack.compose`) offers the same handle.

Every stack is entered in the registry (`harness.processes.registry`) before it starts and
leaves it when it stops, so `harness status --all` / `down --all` find them all. Its
owner is `up` (outlives the command), `run` or `foreground` (dies with the process
that started it: pass that process's `Lifeline`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from harness.errors import HarnessError
from harness.processes import registry
from harness.stack import services as svc

STATE_FILE = "state.json"
SETTINGS_FILE = "stack-settings.json"
SUPERVISOR_LOG = "supervisor.log"
SERVICE_ACTIONS = ("kill", "start", "pause", "resume", "restart")
OWNERS = ("up", "run", "foreground")
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{0,40}$")


class StackError(HarnessError):
    """The stack could not be started, reached, changed or stopped."""


class StackAlreadyRunning(StackError):
    """`up` on a root whose stack is already running."""


@dataclass(frozen=True)
class StackSettings:
    root: Path = Path(".harness")
    app_workers: int = 4
    consumers: int = 2
    env: Mapping[str, str] = field(default_factory=dict)  # TARGET_APP_* for app and consumers
    toxiproxy_url: str | None = None
    health_timeout: float = 30.0
    compose: bool = False
    compose_file: Path | None = None
    owner: str = "up"  # up | run | foreground (see the module docstring)
    proxy_prefix: str = ""  # e.g. "ci-42-": proxies ci-42-app, ci-42-redis on a shared Toxiproxy

    def __post_init__(self) -> None:
        if self.owner not in OWNERS:
            raise StackError(f"stack owner must be one of {', '.join(OWNERS)}, not {self.owner!r}")
        if not _PREFIX.match(self.proxy_prefix):
            raise StackError(f"proxy prefix must be letters, digits, '.', '_' or '-' (at most 40), "
                             f"not {self.proxy_prefix!r}")
        if self.app_workers < 1:
            raise StackError(f"app workers must be >= 1, got {self.app_workers}")
        if self.consumers < 0:
            raise StackError(f"consumers must be >= 0, got {self.consumers}")
        if not self.health_timeout > 0:
            raise StackError(f"health timeout must be > 0, got {self.health_timeout}")
        bad = [key for key in self.env if not key.startswith("TARGET_APP_")]
        if bad:
            raise StackError(f"only TARGET_APP_* variables go to the app, not {', '.join(sorted(bad))}")


# What the harness gives the app unless the environment says otherwise: enough stock
# that a run measures duplicates rather than an empty shelf, and one scarce SKU so
# out-of-stock answers occur too.
DEFAULT_APP_ENV = {"TARGET_APP_INVENTORY": "sku-1=10000000,sku-2=5"}


def target_app_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The TARGET_APP_* part of an environment (what `harness up` passes on)."""
    return {key: value for key, value in environ.items() if key.startswith("TARGET_APP_")}


# --- files under the root -------------------------------------------------------

def control_socket_path(root: Path) -> Path:
    """ROOT/control.sock, or a short path in the temp dir when ROOT is too deep for AF_UNIX."""
    path = Path(root) / "control.sock"
    if len(str(path)) <= 100:
        return path
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"harness-{digest}.sock"


def write_state(root: Path, state: Mapping[str, Any]) -> None:
    path = Path(root) / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, path)


def read_state(root: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(root) / STATE_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise StackError(f"unreadable stack state in {root}: {error}") from error


def remove_state(root: Path) -> None:
    for path in (Path(root) / STATE_FILE, control_socket_path(Path(root))):
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def write_settings(settings: StackSettings) -> None:
    data = asdict(settings)
    data["root"] = str(settings.root)
    data["env"] = dict(settings.env)
    data["compose_file"] = str(settings.compose_file) if settings.compose_file else None
    (settings.root / SETTINGS_FILE).write_text(json.dumps(data, indent=2) + "\n")


def read_settings(root: Path) -> StackSettings:
    data = json.loads((Path(root) / SETTINGS_FILE).read_text())
    data["root"] = Path(data["root"])
    data["compose_file"] = Path(data["compose_file"]) if data.get("compose_file") else None
    return StackSettings(**data)


def _is_supervisor(pid: object, root: Path) -> bool:
    if not isinstance(pid, int) or not svc.pid_alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"harness.stack.supervisor" in cmdline and str(root).encode() in cmdline


# --- the handle -----------------------------------------------------------------

class RunningStack:
    """A local stack run by a supervisor; also a context manager that stops it."""

    def __init__(self, root: Path, state: dict[str, Any],
                 process: subprocess.Popen | None = None, request_timeout: float = 120.0) -> None:
        self.root = root
        self._state = state
        self._process = process  # set when this process started the supervisor
        self.request_timeout = request_timeout

    @property
    def state(self) -> dict[str, Any]:
        """The state file as it is now (pids change after restarts)."""
        try:
            current = read_state(self.root)
        except StackError:
            current = None
        if current is not None:
            self._state = current
        return self._state

    def __enter__(self) -> RunningStack:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.down()

    # process faults and health go through the supervisor

    def _request(self, action: str, service: str | None = None) -> dict[str, Any]:
        path = control_socket_path(self.root)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(self.request_timeout)
                conn.connect(str(path))
                conn.sendall(json.dumps({"action": action, "service": service}).encode() + b"\n")
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        except OSError as error:
            raise StackError(f"the stack supervisor at {path} did not answer: {error}") from error
        try:
            response = json.loads(data)
        except ValueError as error:
            raise StackError(f"the stack supervisor sent a bad answer: {data[:200]!r}") from error
        if not response.get("ok"):
            raise StackError(str(response.get("error", "unknown supervisor error")))
        return response

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

    def services(self) -> list[dict[str, Any]]:
        """One row per service: name, pid, port, log, status, healthy."""
        rows = list(self._request("status")["services"])
        if not any(row["name"] == "toxiproxy" for row in rows):
            url = self.state["toxiproxy_url"]
            rows.append({"name": "toxiproxy", "pid": None, "port": None, "log": None,
                         "status": "external", "healthy": svc.http_healthy(f"{url}/version")})
        return rows

    def health(self) -> dict[str, bool]:
        return {row["name"]: bool(row["healthy"]) for row in self.services()}

    def nemesis(self, recorder: Any = None) -> Any:
        """A `StackNemesis`: this stack's proxies by their plain names (app, redis)."""
        from harness.nemesis.stack_proxies import stack_nemesis

        return stack_nemesis(self.state, recorder)

    def down(self, timeout: float = 30.0) -> None:
        """Stop the supervisor and wait until no service process or port is left."""
        state = self._state
        pid = state.get("supervisor_pid")
        if isinstance(pid, int) and svc.pid_alive(pid):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while isinstance(pid, int) and svc.pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._process is not None:
            try:
                self._process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        leftovers = _kill_leftovers(state, deadline)
        remove_state(self.root)
        registry.unregister_stack(self.root)
        _reclaim_quietly(state.get("toxiproxy_url"))
        if isinstance(pid, int) and svc.pid_alive(pid):
            raise StackError(f"the stack supervisor (pid {pid}) did not stop within {timeout:.0f}s")
        if leftovers:
            raise StackError(f"still running after down: {', '.join(leftovers)}")


def _kill_leftovers(state: Mapping[str, Any], deadline: float) -> list[str]:
    """SIGKILL any process of this stack that survived its supervisor; name what is left.

    A process belongs to the stack when its environment carries the stack's marker,
    so a recorded pid since reused by an unrelated process is never signalled.
    """
    root = str(state.get("root", ""))
    for pid in svc.marked_processes(root):
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    ports = [row["port"] for row in state.get("services", []) if row.get("port")]
    ports += [_url_port(state[key]) for key in ("app_url", "redis_proxy_url") if state.get(key)]
    left: list[str] = []
    while time.monotonic() < deadline:
        left = [f"pid {pid}" for pid in svc.marked_processes(root)]
        left += [f"port {port}" for port in ports if svc.port_listening(port)]
        if not left:
            break
        time.sleep(0.05)
    return left


def _reclaim_quietly(toxiproxy_url: object) -> None:
    """Heal the leftovers of dead owners on this Toxiproxy; a failure here never fails
    the command that merely passes by (the lease stays for the next one)."""
    if not toxiproxy_url:
        return
    for line in registry.reclaim(str(toxiproxy_url)):
        print(f"harness: reclaimed: {line}", file=sys.stderr)


def _url_port(url: str) -> int:
    from urllib.parse import urlsplit

    return int(urlsplit(url).port or 0)


# --- starting and attaching -------------------------------------------------------

def start_stack(settings: StackSettings, *, lifeline: Any = None) -> RunningStack:
    """Start a supervisor for settings.root and wait until every service is healthy.

    With a `harness.processes.lifeline.Lifeline` (required for owners other than `up`), the
    supervisor stops as soon as this process dies, however it dies.
    """
    if settings.owner != "up" and lifeline is None and not settings.compose:
        raise StackError(f"a stack owned by {settings.owner!r} needs its owner's lifeline")
    if settings.compose:
        from harness.stack.compose import start_compose_stack

        return start_compose_stack(settings)  # type: ignore[return-value]
    root = settings.root.resolve()
    settings = StackSettings(**{**settings.__dict__, "root": root})
    running = open_stack(root)
    if running is not None:
        raise StackAlreadyRunning(
            f"a stack is already running in {root} (app_url {running.state.get('app_url')})")
    _reclaim_quietly(settings.toxiproxy_url)
    (root / "logs").mkdir(parents=True, exist_ok=True)
    write_settings(settings)
    log_path = root / "logs" / SUPERVISOR_LOG
    env = dict(os.environ)
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
    state = read_state(root)
    if state is None:
        _stop_supervisor(process)
        raise StackError(f"the supervisor reported ready but wrote no {root / STATE_FILE}")
    return RunningStack(root, state, process=process)


def _read_report(process: subprocess.Popen, timeout: float) -> dict[str, Any]:
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
        return json.loads(data)
    except ValueError:
        return {"ok": False, "error": f"the stack supervisor said {data[:200]!r}"}


def _stop_supervisor(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            svc.signal_group(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
    if process.stdout is not None and not process.stdout.closed:
        process.stdout.close()


def open_stack(root: Path, *, reclaim: bool = True) -> RunningStack | None:
    """The stack running in root, or None; a state file whose supervisor is gone is removed.

    With `reclaim`, leftovers of dead owners on the stack's Toxiproxy are healed on the way.
    """
    root = Path(root).resolve()
    state = read_state(root)
    if state is None:
        return None
    if state.get("mode") == "compose":
        from harness.stack.compose import open_compose_stack

        return open_compose_stack(root, state)  # type: ignore[return-value]
    if not _is_supervisor(state.get("supervisor_pid"), root):
        _kill_leftovers(state, time.monotonic() + 5.0)
        remove_state(root)
        registry.unregister_stack(root)
        if reclaim:
            _reclaim_quietly(state.get("toxiproxy_url"))
        return None
    if reclaim:
        _reclaim_quietly(state.get("toxiproxy_url"))
    return RunningStack(root, state)
