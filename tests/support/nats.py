"""A private NATS server with JetStream for the tests that need one.

`nats_server` (session-scoped) yields a `NatsServer`: `nats-server -a 127.0.0.1 -p PORT
-js -sd DIR` on a free loopback port with its store in a folder of its own under /tmp,
ready once it prints "Server is ready"; stopped (SIGTERM, then SIGKILL) and its folder
removed when the session ends. `nats_subject` (function-scoped) yields a stream name
and subject no other test uses. A missing binary fails the test with how to install it.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.ports import free_ports
from tests.support.server_process import remove_folder, stop_server

INSTALL_HINT = "nats-server is not installed: run scripts/setup.sh (apt-get install nats-server)"
HOST = "127.0.0.1"
READY_TIMEOUT = 20.0
START_ATTEMPTS = 3  # a picked port taken meanwhile: start again on a fresh one (`NatsServer.start`)
PORT_TAKEN = "address already in use"  # in the server's log (lower-cased) when it cannot bind
STOP_GRACE = 10.0


class NatsNotAvailable(RuntimeError):
    """The binary is missing, or the server did not come up (with its log's tail)."""


@dataclass
class NatsServer:
    port: int = 0
    root: Path | None = field(default=None, init=False)
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        assert self.root is not None
        return self.root / "nats.log"

    def start(self) -> None:
        """The server on a free port; a port another process bound between the pick and
        the server's start (PORT_TAKEN in its log) is given up for a fresh one, at most
        START_ATTEMPTS times."""
        binary = shutil.which("nats-server")
        if binary is None:
            raise NatsNotAvailable(INSTALL_HINT)
        self.root = Path(tempfile.mkdtemp(prefix="harness-nats-", dir="/tmp"))
        for attempt in range(1, START_ATTEMPTS + 1):
            (self.port,) = free_ports(1, HOST)
            log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    [binary, "-a", HOST, "-p", str(self.port), "-js", "-sd", str(self.root / "store")],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.root,
                    start_new_session=True)
            deadline = time.monotonic() + READY_TIMEOUT
            while time.monotonic() < deadline:
                if "Server is ready" in self._log_since(log_start):
                    return
                if self.process.poll() is not None:
                    break
                time.sleep(0.05)
            if not (self.process.poll() is not None and PORT_TAKEN in self._log_since(log_start).lower()
                    and attempt < START_ATTEMPTS):
                break
        tail = self.log_path.read_text(errors="replace")[-2000:]
        self.stop()
        raise NatsNotAvailable(f"nats-server on port {self.port} did not get ready:\n{tail}")

    def _log_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def stop(self) -> None:
        """SIGTERM, SIGKILL of its group after a grace time; the folder is removed."""
        stop_server(self.process, signal.SIGTERM, STOP_GRACE)
        self.process = None
        remove_folder(self.root)
        self.root = None


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    """A running nats-server with JetStream for the whole session, stopped and removed after."""
    if shutil.which("nats-server") is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    server = NatsServer()
    try:
        server.start()
    except NatsNotAvailable as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _nats_numbers() -> Iterator[int]:
    return itertools.count(1)


@pytest.fixture
def nats_subject(nats_server: NatsServer, _nats_numbers: Iterator[int]) -> str:
    """A subject (and stream name: the same text) of this test's own."""
    return f"test_{os.getpid()}_{next(_nats_numbers)}_{os.urandom(2).hex()}"
