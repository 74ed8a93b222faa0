"""A private PostgreSQL 15 cluster for any test that needs a real database.

`postgres_server` (session-scoped; tests/conftest.py registers this module for every
test package) yields a `PostgresServer`: a cluster initialised with Debian's binaries
(/usr/lib/postgresql/15/bin, never whatever `initdb` PATH finds) in a folder of its
own under /tmp, listening on a free loopback port, trust authentication for the
`postgres` user. `.dsn` connects to its `postgres` database. `postgres_db`
(function-scoped) yields a `PostgresDatabase`: a fresh database with a unique name in
that cluster (`.dsn`, a `postgresql://` URL psycopg 3 and a probe config accept),
dropped after the test, so no test sees another's tables.

Why the folder is not pytest's tmp_path: `initdb` and `postgres` refuse to run as root,
so on a root machine they run as the package's `postgres` user, and pytest's temporary
folders (/tmp/pytest-of-root, mode 0700) are not reachable for that user. The cluster's
folder is made under /tmp, handed to the user that runs the server, and removed when
the session ends. The server gets SIGINT (PostgreSQL's fast shutdown) at the end, then
SIGKILL if it has not gone after a grace time.

The settings make a throwaway cluster quick to start and cheap to run: no fsync, no
synchronous commit, no full-page writes, small shared buffers, no autovacuum; none of
them changes what a query returns.

When the binaries are missing the fixture fails (never skips) with how to install them.
"""

from __future__ import annotations

import itertools
import os
import pwd
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import psycopg
import pytest

from harness.ports import free_port
from tests.support.server_process import remove_folder, stop_server

BIN_DIR = Path("/usr/lib/postgresql/15/bin")
INSTALL_HINT = "PostgreSQL is not installed: run scripts/setup.sh (apt-get install postgresql)"
HOST = "127.0.0.1"
SUPERUSER = "postgres"
# The OS user that runs initdb and postgres when the tests run as root.
SERVER_OS_USER = "postgres"
READY_TIMEOUT = 30.0
START_ATTEMPTS = 3  # a picked port taken meanwhile: start again on a fresh one (`PostgresServer.start`)
PORT_TAKEN = "Address already in use"  # what the server logs when it cannot bind its port
STOP_GRACE = 10.0

SETTINGS = {
    "listen_addresses": HOST,
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "16MB",
    "autovacuum": "off",
    "max_connections": "200",
}


class PostgresNotAvailable(RuntimeError):
    """The binaries are missing, or the cluster did not come up (with its log's tail)."""


@dataclass(frozen=True)
class PostgresDatabase:
    """One database of a running cluster: where it is and how to connect."""

    host: str
    port: int
    name: str
    user: str = SUPERUSER

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.name}"

    @property
    def address(self) -> str:
        """host:port of the server (what a probe's `dependencies:` names)."""
        return f"{self.host}:{self.port}"


def binaries_installed() -> bool:
    return all((BIN_DIR / name).is_file() and os.access(BIN_DIR / name, os.X_OK) for name in ("initdb", "postgres"))


@dataclass
class PostgresServer:
    """A PostgreSQL cluster in its own folder; `start()` then `stop()` (removes the folder)."""

    host: str = HOST
    port: int = 0
    root: Path | None = field(default=None, init=False)
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def dsn(self) -> str:
        return self.database(SUPERUSER).dsn

    @property
    def log_path(self) -> Path:
        assert self.root is not None
        return self.root / "postgres.log"

    def database(self, name: str) -> PostgresDatabase:
        return PostgresDatabase(host=self.host, port=self.port, name=name)

    def start(self) -> None:
        """initdb, then the server on `port` (0: a free one, picked just before the server
        binds it). A picked port another process bound meanwhile (the server exits with
        PORT_TAKEN in its log) is given up for a fresh one, at most START_ATTEMPTS times."""
        if not binaries_installed():
            raise PostgresNotAvailable(INSTALL_HINT)
        pick = self.port == 0
        self.root = Path(tempfile.mkdtemp(prefix="harness-pg-", dir="/tmp"))
        owner = _server_user()
        if owner is not None:
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        data = self.root / "data"
        with open(self.log_path, "ab") as log:
            initdb = subprocess.run(
                [str(BIN_DIR / "initdb"), "-D", str(data), "-A", "trust", "-U", SUPERUSER, "--no-sync",
                 "--no-instructions", "--locale=C", "--encoding=UTF8"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.root,
                env=_server_env(self.root), check=False, timeout=60, **_as_user(owner))
        if initdb.returncode != 0:
            self._fail(f"initdb exited with {initdb.returncode}")
        settings = [arg for key, value in SETTINGS.items() for arg in ("-c", f"{key}={value}")]
        for attempt in range(1, START_ATTEMPTS + 1):
            if pick:
                # After initdb, not before: initdb takes seconds on a busy machine, and
                # a port picked free is free only until someone binds it.
                self.port = free_port(self.host)
            log_start = self.log_path.stat().st_size
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    [str(BIN_DIR / "postgres"), "-D", str(data), "-k", str(self.root), "-p", str(self.port),
                     *settings],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.root,
                    env=_server_env(self.root), start_new_session=True, **_as_user(owner))
            if self._wait_ready():
                return
            with open(self.log_path, "rb") as log:
                log.seek(log_start)
                taken = PORT_TAKEN in log.read().decode(errors="replace")
            if not (pick and taken and attempt < START_ATTEMPTS):
                self._fail(f"postgres exited with {self.process.returncode}")
            self.process = None

    def _wait_ready(self) -> bool:
        """True once the server answers; False when it exited first."""
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                return False
            try:
                with psycopg.connect(self.dsn, connect_timeout=2) as connection:
                    connection.execute("select 1")
                return True
            except psycopg.OperationalError:
                time.sleep(0.1)
        self._fail(f"postgres on port {self.port} did not answer within {READY_TIMEOUT:.0f} s")

    def _fail(self, what: str) -> NoReturn:
        tail = self.log_path.read_text(errors="replace")[-2000:] if self.log_path.exists() else ""
        self.stop()
        raise PostgresNotAvailable(f"{what}:\n{tail}")

    def stop(self) -> None:
        """Fast shutdown (SIGINT), SIGKILL of its group after a grace time; the folder is removed."""
        stop_server(self.process, signal.SIGINT, STOP_GRACE)  # the postmaster's children are in its group
        self.process = None
        remove_folder(self.root)
        self.root = None

    def create_database(self, name: str) -> PostgresDatabase:
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.database(name)

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            # WITH (FORCE): a service the test started may still hold a connection.
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _server_user() -> pwd.struct_passwd | None:
    """The user the server runs as: `postgres` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_OS_USER)
    except KeyError as exc:
        raise PostgresNotAvailable(INSTALL_HINT) from exc


def _as_user(owner: pwd.struct_passwd | None) -> dict[str, object]:
    if owner is None:
        return {}
    return {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}


def _server_env(root: Path) -> dict[str, str]:
    # Only what the server needs: none of root's HOME, nor a PG* variable of the shell.
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root), "LC_ALL": "C"}


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A running PostgreSQL cluster for the whole session, stopped and removed after."""
    if not binaries_installed():
        pytest.fail(INSTALL_HINT, pytrace=False)
    server = PostgresServer()
    try:
        server.start()
    except PostgresNotAvailable as exc:
        pytest.fail(str(exc), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _postgres_db_numbers() -> Iterator[int]:
    return itertools.count(1)


@pytest.fixture
def postgres_db(postgres_server: PostgresServer, _postgres_db_numbers: Iterator[int]) -> Iterator[PostgresDatabase]:
    """A fresh database in the session's cluster, dropped after the test."""
    name = f"test_{os.getpid()}_{next(_postgres_db_numbers)}"
    database = postgres_server.create_database(name)
    yield database
    postgres_server.drop_database(name)
