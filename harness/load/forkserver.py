"""A Locust fork server: Locust and the harness's load modules imported once, each
Locust run forked from that process instead of started from nothing.

A job that runs many short loads (the smoke job: 21 of them, six side by side on two
cores) paid a Python start and Locust's imports for every one: about 0.6 s of CPU
each, and 3-5 s of wall time while the other loads held the cores. A fork costs
milliseconds and shares the imported pages.

The server (`python -m harness.load.forkserver SOCKET`, started by
`LocustForkServer`) imports Locust (which monkey-patches the process with gevent) and
what every bundled locustfile imports, then listens on a Unix socket. Protocol, one
connection per run, JSON lines (typed on both sides: `RunRequest`, and the server's
messages `Forked`, `Exited`, `Refused`):

    client -> server   {"argv": [...], "env": {...}, "cwd": "...", "log": "..."}
    server -> client   {"pid": N}            once forked
    server -> client   {"exit": CODE}        when that process has exited
                                             (negative: killed by that signal, as Popen)

or `{"error": "..."}` instead of the pid when it could not fork. The forked process
starts a session of its own (its own process group, as a `locust` subprocess would),
carries a parent-death SIGTERM (the server dies with the harness, its runs with the
server), sends its output to `log`, takes `env` as its whole environment and runs
`locust.main.main()` with `argv` as its command line.

The client side (`LocustForkServer`, `ForkedChild`) imports nothing of Locust: the
harness process stays unpatched. `ForkedChild` answers what `LocustProcess` asks of a
`subprocess.Popen`: pid, poll, wait, returncode.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.json_lines import read_line
from harness.process_handle import pid_alive

# Imported at the top: the standard library and harness modules that import nothing
# else. The server must import Locust (its gevent monkey-patching) before anything
# that imports ssl or sockets' users (redis, requests); the rest comes in functions.

SOCKET_NAME = "locust-forkserver.sock"
LOG_NAME = "locust-forkserver.log"
READY_TIMEOUT = 60.0  # seconds for the server to import and listen (a busy machine)
REAP_INTERVAL = 0.05  # seconds between two looks for exited runs


class ForkServerError(HarnessError):
    """The fork server did not start, or could not fork a run."""


@dataclass(frozen=True)
class RunRequest:
    """What the client asks for: one Locust run with this command line (without
    `-m locust`), this whole environment, this working directory and this log."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    log: str

    def to_line(self) -> bytes:
        return json.dumps({"argv": list(self.argv), "env": dict(self.env), "cwd": self.cwd,
                           "log": self.log}).encode() + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> RunRequest:
        """The request in one JSON line; ValueError says what is wrong with it."""
        try:
            raw = json.loads(line)
            argv, env = raw["argv"], raw["env"]
            if not isinstance(argv, list) or not isinstance(env, dict):
                raise TypeError("argv must be a list and env an object")
            return cls(argv=tuple(str(arg) for arg in argv),
                       env={str(key): str(value) for key, value in env.items()},
                       cwd=str(raw["cwd"]), log=str(raw["log"]))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{type(error).__name__}: {error}") from None


@dataclass(frozen=True)
class Forked:
    """The server forked the run: `pid` leads its own session."""

    pid: int


@dataclass(frozen=True)
class Exited:
    """The run has exited and the server reaped it (negative: killed by that signal)."""

    code: int


@dataclass(frozen=True)
class Refused:
    """The server could not fork the run, and why."""

    error: str


ServerMessage = Forked | Exited | Refused


def message_line(message: ServerMessage) -> bytes:
    """A server message as its JSON line."""
    if isinstance(message, Forked):
        raw: dict[str, object] = {"pid": message.pid}
    elif isinstance(message, Exited):
        raw = {"exit": message.code}
    else:
        raw = {"error": message.error}
    return json.dumps(raw).encode() + b"\n"


def parse_message(line: bytes) -> ServerMessage:
    """A server message from its JSON line; ValueError for anything else."""
    try:
        raw = json.loads(line)
        if "pid" in raw:
            return Forked(int(raw["pid"]))
        if "exit" in raw:
            return Exited(int(raw["exit"]))
        if "error" in raw:
            return Refused(str(raw["error"]))
    except (ValueError, TypeError) as error:
        raise ValueError(f"not a fork server message: {line[:200]!r} ({error})") from None
    raise ValueError(f"not a fork server message: {line[:200]!r}")


# --- the server (its own process) ---------------------------------------------------

def serve(socket_path: Path, parent_pid: int) -> None:
    """Import Locust and what every bundled locustfile imports (so a forked run imports
    only its locustfile), listen on socket_path, fork a run per request until the
    parent (the harness) is gone or SIGTERM comes."""
    import locust  # noqa: F401 - first: it monkey-patches the process
    import locust.main  # noqa: F401

    import harness.load.flows  # noqa: F401
    import harness.load.recording  # noqa: F401
    import harness.load.user  # noqa: F401
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(socket_path))
    os.chmod(socket_path, 0o600)
    listener.listen(64)
    runs: dict[int, socket.socket] = {}
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    while not stopping and os.getppid() == parent_pid:
        readable, _, _ = select.select([listener], [], [], REAP_INTERVAL)
        if readable:
            connection, _ = listener.accept()
            pid = _fork_run(connection, listener, runs)
            if pid is not None:
                runs[pid] = connection
        _reap(runs)
    listener.close()
    for connection in runs.values():
        connection.close()


def _fork_run(connection: socket.socket, listener: socket.socket,
              runs: Mapping[int, socket.socket]) -> int | None:
    try:
        request = RunRequest.from_line(read_line(connection, timeout=10.0))
    except (OSError, ValueError) as error:
        _send(connection, Refused(f"bad request: {error}"))
        connection.close()
        return None
    server_pid = os.getpid()
    # The run writes one byte once it leads its own session: only then is its pid a
    # process group the client can signal (LocustProcess.stop signals the group).
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the run
        os.close(ready_read)
        listener.close()
        for other in runs.values():
            other.close()
        connection.close()
        _run_locust(request, server_pid, ready_write)
    os.close(ready_write)
    os.read(ready_read, 1)  # b"" too if the run died first: its exit is reaped and sent
    os.close(ready_read)
    _send(connection, Forked(pid))
    return pid


def _run_locust(request: RunRequest, server_pid: int, ready: int) -> None:
    code = 1
    try:
        import random

        from harness.stack.services import _child_setup

        os.setsid()
        os.write(ready, b"1")
        os.close(ready)
        _child_setup(server_pid, signal.SIGTERM)()  # what a Popen'd Locust gets in preexec_fn
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's handler is not Locust's
        out = os.open(request.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        os.close(devnull)
        os.chdir(request.cwd)
        os.environ.clear()
        os.environ.update(request.env)
        random.seed()  # not the server's state: every run would draw the same waits
        sys.argv = ["locust", *request.argv]
        from locust import main as locust_main

        locust_run: Any = locust_main.main  # Locust's entry point carries no annotations
        locust_run()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - whatever it was, the run must end with a code
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def _reap(runs: dict[int, socket.socket]) -> None:
    for pid in list(runs):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 255 << 8  # reaped elsewhere: its code is lost
        if done == 0:
            continue
        connection = runs.pop(pid)
        _send(connection, Exited(os.waitstatus_to_exitcode(status)))
        connection.close()


def _send(connection: socket.socket, message: ServerMessage) -> None:
    try:
        connection.sendall(message_line(message))
    except OSError:
        pass  # the client went away: nothing to tell


# --- the client (the harness's side) ------------------------------------------------

class ForkedChild:
    """One Locust run forked by the server, seen as LocustProcess sees a Popen: the
    exit code comes over the run's connection when the server has reaped it."""

    def __init__(self, connection: socket.socket, pid: int, argv: Sequence[str]) -> None:
        self.pid = pid
        self.args = list(argv)
        self.returncode: int | None = None
        self._connection = connection
        self._buffer = b""
        self._server_gone = False

    def poll(self) -> int | None:
        self._read(timeout=0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self._read(timeout=left)
        return self.returncode

    def _read(self, *, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        if self._server_gone:
            # No exit code will come; the run has a parent-death SIGTERM from the server.
            if pid_alive(self.pid):
                time.sleep(min(timeout, 0.1) if timeout is not None else 0.1)
            else:
                self.returncode = -signal.SIGTERM
            return
        readable, _, _ = select.select([self._connection], [], [], timeout)
        if not readable:
            return
        chunk = self._connection.recv(4096)
        if not chunk:
            self._server_gone = True
            self._connection.close()
            return
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = parse_message(line)
            if isinstance(message, Exited):
                self.returncode = message.code
        if self.returncode is not None:
            self._connection.close()


class LocustForkServer:
    """The server process, started by `start()` (or `with`), stopped by `stop()`;
    `fork_locust(socket_path, ...)` asks it for one run, and `socket_path` is what a
    RunSpec names."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.socket_path = self.directory / SOCKET_NAME
        self.log_path = self.directory / LOG_NAME
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from harness.stack.services import spawn

        self.directory.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        self._process = spawn([sys.executable, "-m", "harness.load.forkserver", str(self.socket_path),
                               str(os.getpid())],
                              env=os.environ, log_path=self.log_path, death_signal=signal.SIGTERM)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ForkServerError(f"the Locust fork server exited with {self._process.returncode}; "
                                      f"see {self.log_path}")
            if self.socket_path.exists():
                return
            time.sleep(0.05)
        self.stop()
        raise ForkServerError(f"the Locust fork server did not listen within {READY_TIMEOUT:g}s; "
                              f"see {self.log_path}")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self.socket_path.unlink(missing_ok=True)

    def __enter__(self) -> LocustForkServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def fork_locust(socket_path: Path, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path,
                log_path: Path) -> ForkedChild:
    """Ask the server at socket_path for one Locust run (`argv` without `-m locust`)."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(socket_path))
        request = RunRequest(argv=tuple(argv), env=dict(env), cwd=str(cwd), log=str(log_path))
        connection.sendall(request.to_line())
        line = read_line(connection, timeout=30.0)
        reply: ServerMessage = parse_message(line) if line else Refused("no answer")
    except (OSError, ValueError) as error:
        connection.close()
        raise ForkServerError(f"the Locust fork server at {socket_path} did not fork a run: {error}") from error
    if not isinstance(reply, Forked):
        connection.close()
        detail = reply.error if isinstance(reply, Refused) else f"it answered {reply}"
        raise ForkServerError(f"the Locust fork server at {socket_path} did not fork a run: {detail}")
    connection.settimeout(None)
    return ForkedChild(connection, reply.pid, argv)


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]))
