"""Run a private `redis-server` on a loopback port, for the stack and the tests."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.ports import bindable, free_port

PORT_ATTEMPTS = 3  # ports a server that picks its own tries before it fails

INSTALL_HINT = (
    "redis-server is not on PATH; install it with "
    "`apt-get update && apt-get install -y redis-server` (or run `make setup`)"
)


class RedisServerError(RuntimeError):
    """redis-server is missing or did not come up."""


@dataclass
class RedisServer:
    """One redis-server process with its own data directory.

    `appendonly` with `appendfsync always` makes every acknowledged write survive a
    kill -9, which the stack needs for its restart faults.
    """

    data_dir: Path
    port: int = 0
    host: str = "127.0.0.1"
    appendonly: bool = True
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def command(self) -> list[str]:
        executable = shutil.which("redis-server")
        if executable is None:
            raise RedisServerError(INSTALL_HINT)
        args = [
            executable,
            "--bind", self.host,
            "--port", str(self.port),
            "--dir", str(self.data_dir),
            "--save", "",
            "--protected-mode", "no",
            "--daemonize", "no",
            "--databases", "64",
        ]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        return args

    def start(self, *, timeout: float = 10.0, start_new_session: bool = True) -> None:
        """Start and wait until it answers. A port it picked itself (port 0) and lost to
        another process before redis-server bound it is given up for another one
        (PORT_ATTEMPTS in all); a port it was given is kept."""
        picked = self.port == 0
        for attempt in range(1, PORT_ATTEMPTS + 1):
            if picked:
                self.port = free_port(self.host)
            try:
                self._start_once(timeout=timeout, start_new_session=start_new_session)
                return
            except RedisServerError:
                if not picked or attempt == PORT_ATTEMPTS or bindable(self.port, self.host):
                    raise  # not a lost port (or no port left to try)

    def _start_once(self, *, timeout: float, start_new_session: bool) -> None:
        if not bindable(self.port, self.host):
            # Checked first: wait_ready's PING would go to whoever listens there and
            # wait for its answer.
            raise RedisServerError(f"redis-server: port {self.port} is already in use by another process")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_path or self.data_dir / "redis.log"
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=start_new_session,
            )
        self.wait_ready(timeout=timeout, log_path=log_path)

    def wait_ready(self, *, timeout: float, log_path: Path) -> None:
        import redis

        deadline = time.monotonic() + timeout
        client = redis.Redis(host=self.host, port=self.port, socket_timeout=0.5)
        try:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    break
                try:
                    if client.ping():
                        return
                except redis.RedisError:
                    time.sleep(0.05)
        finally:
            client.close()
        tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
        self.stop()
        raise RedisServerError(f"redis-server on port {self.port} did not become ready:\n{tail}")

    def stop(self, *, timeout: float = 5.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)
        self.process = None
