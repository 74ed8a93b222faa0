"""A private RabbitMQ 3.10 node for the tests that need a real AMQP broker.

`rabbitmq_server` (session-scoped: a node takes about 5 s to start, more on a busy
machine) yields a `RabbitServer`; `rabbitmq_queue` (function-scoped) yields a queue
name no other test uses, so tests share the node and never each other's messages.

The node runs as the caller from `/usr/lib/rabbitmq/bin/rabbitmq-server` (Debian's
`/usr/sbin/rabbitmq-server` switches to the `rabbitmq` user, which cannot write the
test's folder), configured only through its environment:

- `RABBITMQ_NODENAME=<unique>@localhost`, `RABBITMQ_NODE_IP_ADDRESS=127.0.0.1`,
  `RABBITMQ_NODE_PORT` (AMQP) and `RABBITMQ_DIST_PORT` (Erlang distribution) on free
  loopback ports (harness.ports picks them below the ephemeral range: a restarted node
  binds them again);
- `RABBITMQ_MNESIA_BASE`, `RABBITMQ_LOG_BASE`, `HOME` and the working directory in a
  folder of its own under /tmp (a crash writes `erl_crash.dump` there), removed after;
- `ERL_EPMD_PORT` on a free port and `ERL_EPMD_ADDRESS=127.0.0.1`: the node starts an
  Erlang port mapper of its own there, so stopping it (`epmd -port P -kill`) can never
  touch the system's epmd or another node's;
- the management plugin on a free loopback port, with statistics every 500 ms: its
  HTTP API is where the probe reads the broker's own count of redeliveries.
- a VM shutdown bounded to SHUTDOWN_MS: a clean stop's work takes milliseconds and its
  VM then idled 6 s before it exited, at every stop and restart.

A port picked free can be bound by another test's server before the node boots
(seconds later): a node that exits with `eaddrinuse` is started again on fresh ports
(`START_ATTEMPTS`). guest/guest works on loopback. The node is stopped with SIGTERM (a clean shutdown),
then SIGKILL of its process group after a grace time. Missing binaries fail the test
(never skip) with how to install them.

`prepare()` alone picks the ports and writes the folder without starting anything:
`probe_process()` is then the `process:` of a probe config's `messages:` entry, so the
probe itself starts, restarts and stops the node (harness.probe.brokers.process), and
`node_processes()` lists what of it still runs (nothing, once the probe is done).
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

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
INSTALL_HINT = "RabbitMQ is not installed: run scripts/setup.sh (apt-get install rabbitmq-server)"
HOST = "127.0.0.1"
READY_TIMEOUT = 60.0
START_ATTEMPTS = 3  # starts on fresh ports when a port was taken meanwhile (`RabbitServer.start`)
STOP_GRACE = 15.0
SHUTDOWN_MS = 2500  # the VM's limit for a clean shutdown (`environment`)


class RabbitNotAvailable(RuntimeError):
    """The binaries are missing, or the node did not come up (with its log's tail)."""


@dataclass
class RabbitServer:
    """One RabbitMQ node in a folder of its own; `start()` then `stop()`."""

    name: str = field(default_factory=lambda: f"harness{os.getpid()}_{os.urandom(2).hex()}")
    port: int = 0
    dist_port: int = 0
    management_port: int = 0
    epmd_port: int = 0
    root: Path | None = field(default=None, init=False)
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def node(self) -> str:
        return f"{self.name}@localhost"

    @property
    def address(self) -> str:
        """host:port of the AMQP listener (what a probe's `dependencies:` names)."""
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{HOST}:{self.port}/%2F"

    @property
    def management_url(self) -> str:
        return f"http://guest:guest@{HOST}:{self.management_port}"

    @property
    def log_path(self) -> Path:
        assert self.root is not None
        return self.root / "server.log"

    def environment(self) -> dict[str, str]:
        assert self.root is not None
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root), "LC_ALL": "C.UTF-8",
            "RABBITMQ_NODENAME": self.node, "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(self.port), "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.root / "mnesia"), "RABBITMQ_LOG_BASE": str(self.root / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.root / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.root / "enabled_plugins"),
            # The distribution listener on loopback too (it binds every interface by default).
            # After SIGTERM the node closes its listeners, connections and message stores in
            # about 20 ms (its log), then its VM took 6 s more to exit, a wait every stop,
            # restart and session end paid: init's shutdown_time ends it after SHUTDOWN_MS.
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1} "
                                                   f"-shutdown_time {SHUTDOWN_MS}",
            "ERL_EPMD_PORT": str(self.epmd_port), "ERL_EPMD_ADDRESS": HOST,
        }

    def prepare(self) -> None:
        """Free ports and a folder of its own, configured; nothing started."""
        if not (SERVER.is_file() and os.access(SERVER, os.X_OK)) or shutil.which("epmd") is None:
            raise RabbitNotAvailable(INSTALL_HINT)
        self.port, self.dist_port, self.management_port, self.epmd_port = free_ports(4)
        self.root = Path(tempfile.mkdtemp(prefix="harness-rabbitmq-", dir="/tmp"))
        (self.root / "enabled_plugins").write_text("[rabbitmq_management].\n")
        (self.root / "rabbitmq.conf").write_text(
            f"management.tcp.ip = {HOST}\nmanagement.tcp.port = {self.management_port}\n"
            "collect_statistics_interval = 500\n")

    def probe_process(self, name: str = "broker") -> dict[str, object]:
        """The `process:` of a probe's `messages:` entry that runs this (prepared) node:
        the probe starts it, may restart it, and stops it and its port mapper after."""
        assert self.root is not None, "prepare() first"
        return {"name": name, "command": [str(SERVER)], "env": self.environment(), "cwd": str(self.root),
                "ready": {"timeout": f"{READY_TIMEOUT:.0f}s"}, "stop_timeout": f"{STOP_GRACE:.0f}s",
                "after_stop": ["epmd", "-port", str(self.epmd_port), "-kill"]}

    def node_processes(self) -> list[int]:
        """Pids of live processes started for this node (its Erlang VM, its port mapper):
        their environment names the node's own folder or epmd port."""
        assert self.root is not None
        marks = (f"RABBITMQ_MNESIA_BASE={self.root / 'mnesia'}".encode(), f"ERL_EPMD_PORT={self.epmd_port}".encode())
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(mark in environ for mark in marks):
                found.append(int(entry.name))
        return found

    def start(self) -> None:
        """Prepare and start the node, and wait until it answers. A node that could not
        bind one of its ports (`eaddrinuse`: taken between the pick and the node's boot,
        seconds later, by another test's server) is started again on fresh ports, at
        most START_ATTEMPTS times in all; any other failure is raised at once."""
        for attempt in range(1, START_ATTEMPTS + 1):
            self.prepare()
            assert self.root is not None
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen([str(SERVER)], stdout=log, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, cwd=self.root, env=self.environment(),
                                                start_new_session=True)
            try:
                self._wait_ready()
                return
            except RabbitNotAvailable as error:
                if "eaddrinuse" not in str(error) or attempt == START_ATTEMPTS:
                    raise

    def _wait_ready(self) -> None:
        import pika
        import requests
        from pika.adapters.utils.connection_workflow import AMQPConnectorException

        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                self._fail(f"rabbitmq-server exited with {self.process.returncode}")
            try:
                connection = pika.BlockingConnection(pika.URLParameters(self.url + "?connection_attempts=1"))
                connection.close()
                if requests.get(f"http://{HOST}:{self.management_port}/api/overview", auth=("guest", "guest"),
                                timeout=2).status_code == 200:
                    return
            except (pika.exceptions.AMQPError, AMQPConnectorException, requests.RequestException, OSError):
                pass  # not the node yet, or another server on its port (a handshake timeout)
            time.sleep(0.25)
        self._fail(f"RabbitMQ on port {self.port} did not answer within {READY_TIMEOUT:.0f} s")

    def _fail(self, what: str) -> None:
        tail = self.log_path.read_text(errors="replace")[-2000:] if self.root and self.log_path.exists() else ""
        self.stop()
        raise RabbitNotAvailable(f"{what}:\n{tail}")

    def stop(self) -> None:
        """SIGTERM the node, SIGKILL its group after a grace time, stop its own epmd, remove the folder."""
        stop_server(self.process, signal.SIGTERM, STOP_GRACE, sweep_group=True)  # what is left of its group
        self.process = None
        if self.epmd_port:
            # This node's own port mapper (ERL_EPMD_PORT): never the system's.
            subprocess.run(["epmd", "-port", str(self.epmd_port), "-kill"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env={**os.environ, "ERL_EPMD_ADDRESS": HOST},
                           check=False, timeout=10)
        remove_folder(self.root)
        self.root = None


@pytest.fixture(scope="session")
def rabbitmq_server() -> Iterator[RabbitServer]:
    """A running RabbitMQ node for the whole session, stopped and removed after."""
    if not SERVER.is_file():
        pytest.fail(INSTALL_HINT, pytrace=False)
    server = RabbitServer()
    try:
        server.start()
    except RabbitNotAvailable as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _rabbitmq_queue_numbers() -> Iterator[int]:
    return itertools.count(1)


@pytest.fixture
def rabbitmq_queue(rabbitmq_server: RabbitServer, _rabbitmq_queue_numbers: Iterator[int]) -> str:
    """A queue name of this test's own on the session's node."""
    return f"test-{os.getpid()}-{next(_rabbitmq_queue_numbers)}-{os.urandom(2).hex()}"
