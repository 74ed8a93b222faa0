"""Steps seen on the PostgreSQL wire and faults at a step, through the embedded
Toxiproxy with protocol `postgres` in front of a real PostgreSQL server
(harness.toxiproxy.pgwire, harness.toxiproxy.steps): the steps psycopg makes with
simple and extended (parameterized, prepared, pipelined) queries, and a child
process inserting payments killed, paused or cut exactly at a step, checked on
the table itself. The mirror of test_wire_steps.py's Redis tests."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from harness.toxiproxy.pgwire import SSL_REQUEST
from harness.toxiproxy.server import EmbeddedToxiproxy
from harness.toxiproxy.steps_client import ProxySteps
from tests.support.postgres import PostgresDatabase

INSERT_STEP = "db INSERT payments *"
TABLE = "CREATE TABLE payments (id text PRIMARY KEY, amount int NOT NULL)"

# Inserts payments p0, p1, ... one statement each: parameterized (the extended
# protocol) or with literals (a simple Query); in a transaction per payment
# (BEGIN, INSERT, COMMIT) unless autocommit.
CHILD = textwrap.dedent(
    """
    import sys
    import psycopg
    dsn, limit, mode, autocommit = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "autocommit"
    with psycopg.connect(dsn, autocommit=autocommit) as connection:
        for number in range(limit):
            if mode == "extended":
                connection.execute("INSERT INTO payments VALUES (%s, %s)", (f"p{number}", number))
            else:
                connection.execute(f"INSERT INTO payments VALUES ('p{number}', {number})")
            if not autocommit:
                connection.commit()
    """
)


def _proxy(toxiproxy: EmbeddedToxiproxy, name: str, upstream: str) -> int:
    body = {"name": name, "listen": "127.0.0.1:0", "upstream": upstream}
    response = requests.post(f"{toxiproxy.url}/proxies", json=body, timeout=5)
    assert response.status_code == 201, response.text
    return int(response.json()["listen"].rsplit(":", 1)[1])


@pytest.fixture
def db(postgres_db: PostgresDatabase) -> PostgresDatabase:
    """The test's database with an empty payments table (made directly, not proxied)."""
    with psycopg.connect(postgres_db.dsn, autocommit=True) as connection:
        connection.execute(TABLE)
    return postgres_db


@pytest.fixture
def db_proxy(embedded_toxiproxy: EmbeddedToxiproxy, db: PostgresDatabase) -> tuple[str, ProxySteps]:
    """A proxy named `db` in front of the database: the DSN through it, and its steps."""
    port = _proxy(embedded_toxiproxy, "db", db.address)
    return f"postgresql://{db.user}@127.0.0.1:{port}/{db.name}", ProxySteps(embedded_toxiproxy.url, "db")


def _rows(db: PostgresDatabase) -> list[str]:
    with psycopg.connect(db.dsn, autocommit=True) as connection:
        return [row[0] for row in connection.execute("SELECT id FROM payments ORDER BY amount")]


def _fired(steps: ProxySteps) -> dict[str, Any]:
    """The one trigger's record once its verification is settled (it polls /proc)."""
    while True:
        (trigger,) = steps.triggers()
        fired = trigger["fired"]
        if fired is not None and fired["verified"] is not None:
            return dict(fired)
        time.sleep(0.02)


@pytest.fixture
def child(tmp_path: Path, db_proxy: tuple[str, ProxySteps]) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    script = tmp_path / "insert_loop.py"
    script.write_text(CHILD)
    started: list[subprocess.Popen[bytes]] = []

    def start(limit: int, mode: str, autocommit: bool) -> subprocess.Popen[bytes]:
        argv = [sys.executable, str(script), db_proxy[0], str(limit), mode, "autocommit" if autocommit else "tx"]
        process = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_steps_of_simple_extended_prepared_and_pipelined_queries(db_proxy: tuple[str, ProxySteps]) -> None:
    dsn, steps = db_proxy
    steps.watch("postgres", role="service")
    with psycopg.connect(dsn) as connection:  # not autocommit: psycopg sends BEGIN first
        connection.execute("INSERT INTO payments VALUES ('a', 1)")  # no parameters: a simple Query
        connection.execute("INSERT INTO payments VALUES (%s, %s)", ("b", 2))  # Parse/Bind/Execute/Sync
        assert connection.execute("SELECT amount FROM payments WHERE id = %s", ("a",)).fetchone() == (1,)
        connection.commit()
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("UPDATE payments SET amount = 3 WHERE id = 'a'")
        with pytest.raises(psycopg.errors.UniqueViolation):  # an error reply pairs like any other
            connection.execute("INSERT INTO payments VALUES (%s, %s)", ("a", 9))
        connection.execute("BEGIN; INSERT INTO payments VALUES ('c', 4); COMMIT")
        for number in range(2):  # a named prepared statement: parsed once, executed twice
            connection.execute("DELETE FROM payments WHERE id = %s", (f"x{number}",), prepare=True)
        with connection.pipeline():  # several Executes before one Sync
            for number in range(3):
                connection.execute("INSERT INTO payments VALUES (%s, %s)", (f"q{number}", 10 + number))
    assert steps.steps() == {
        "db BEGIN - service": 1,
        "db INSERT payments service": 6,
        "db SELECT payments service": 1,
        "db COMMIT - service": 1,
        "db UPDATE payments service": 1,
        "db BEGIN;INSERT;COMMIT payments service": 1,
        "db DELETE payments service": 2,
    }
    wire = steps.wire()
    assert wire["protocol"] == "postgres" and wire["unparsed"] == wire["untracked"] == 0


@pytest.mark.parametrize("mode", ["extended", "simple"])
@pytest.mark.parametrize(("action", "rows"), [
    ("before", ["p0", "p1"]),  # the third INSERT held: it never reaches the server
    ("after", ["p0", "p1", "p2"]),  # with autocommit its reply came back: the row is there
])
def test_a_crash_at_the_third_insert_kills_the_sender_with_the_rows_the_action_leaves(
    db_proxy: tuple[str, ProxySteps], db: PostgresDatabase, child: Callable[..., subprocess.Popen[bytes]],
    mode: str, action: str, rows: list[str],
) -> None:
    _, steps = db_proxy
    steps.watch("postgres", role="worker")
    steps.arm(action, INSERT_STEP, occurrence=3)
    process = child(1000, mode, True)
    assert process.wait(timeout=60) == -9
    assert _rows(db) == rows
    assert steps.steps()["db INSERT payments worker"] == 3
    fired = _fired(steps)
    assert fired["pid"] == process.pid and fired["verified"] is True
    assert fired["step"] == "db INSERT payments worker"


def test_crash_after_insert_in_a_transaction_kills_the_sender_before_its_commit(
    db_proxy: tuple[str, ProxySteps], db: PostgresDatabase, child: Callable[..., subprocess.Popen[bytes]]
) -> None:
    _, steps = db_proxy
    steps.watch("postgres", role="worker")
    steps.arm("after", INSERT_STEP, occurrence=3)
    process = child(1000, "extended", False)
    assert process.wait(timeout=60) == -9
    # The third INSERT ran, but its COMMIT was never sent: the server rolled it back.
    assert _rows(db) == ["p0", "p1"]
    seen = steps.steps()
    assert seen["db INSERT payments worker"] == 3 and seen["db COMMIT - worker"] == 2
    assert _fired(steps)["verified"] is True


def test_pause_after_insert_stops_then_continues_the_sender(
    db_proxy: tuple[str, ProxySteps], db: PostgresDatabase, child: Callable[..., subprocess.Popen[bytes]]
) -> None:
    _, steps = db_proxy
    steps.watch("postgres", role="worker")
    steps.arm("pause", INSERT_STEP, occurrence=3, duration_ms=200)
    process = child(10, "extended", True)
    assert process.wait(timeout=60) == 0
    assert _rows(db) == [f"p{number}" for number in range(10)]
    fired = _fired(steps)
    assert fired["pid"] == process.pid and fired["verified"] is True  # seen stopped ('T')
    assert fired["resumed_at"] >= fired["at"]


@pytest.mark.parametrize("parameters", [("e1", 1), None])
def test_error_after_insert_loses_the_reply_but_not_the_row(
    db_proxy: tuple[str, ProxySteps], db: PostgresDatabase, parameters: tuple[str, int] | None
) -> None:
    dsn, steps = db_proxy
    steps.watch("postgres", role="service")
    steps.arm("error", "db INSERT payments service")
    with psycopg.connect(dsn, autocommit=True) as connection:
        with pytest.raises(psycopg.OperationalError):
            if parameters is None:
                connection.execute("INSERT INTO payments VALUES ('e1', 1)")
            else:
                connection.execute("INSERT INTO payments VALUES (%s, %s)", parameters)
        assert connection.closed
    assert _rows(db) == ["e1"]
    fired = _fired(steps)
    assert fired["action"] == "error" and fired["verified"] is True


def _echo_server(answer: bytes | None) -> socket.socket:
    """A loopback server for one connection: after `answer` (sent once the first 8
    bytes arrived, when given) it echoes whatever it reads."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection:
            if answer is not None:
                received = b""
                while len(received) < 8:
                    received += connection.recv(8 - len(received))
                connection.sendall(answer)
            while data := connection.recv(65536):
                connection.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return listener


def _exchange(port: int, payload: bytes, expect: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(payload)
        got = b""
        while len(got) < expect:
            data = client.recv(65536)
            assert data, f"connection closed after {got!r}"
            got += data
    return got


def test_garbage_passes_untouched_and_is_counted(embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    listener = _echo_server(None)
    port = _proxy(embedded_toxiproxy, "echo", f"127.0.0.1:{listener.getsockname()[1]}")
    steps = ProxySteps(embedded_toxiproxy.url, "echo")
    steps.watch("postgres", role="app")
    garbage = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00\xff binary" * 3
    assert _exchange(port, garbage, len(garbage)) == garbage
    wire = steps.wire()
    assert wire["unparsed"] == 1 and wire["steps"] == {}
    listener.close()


def test_a_connection_the_server_switches_to_ssl_is_untracked_and_untouched(
    embedded_toxiproxy: EmbeddedToxiproxy,
) -> None:
    listener = _echo_server(b"S")
    port = _proxy(embedded_toxiproxy, "tls", f"127.0.0.1:{listener.getsockname()[1]}")
    steps = ProxySteps(embedded_toxiproxy.url, "tls")
    steps.watch("postgres", role="app")
    ssl_request = struct.pack("!II", 8, SSL_REQUEST)
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(ssl_request)
        assert client.recv(1) == b"S"
        hello = b"\x16\x03\x01\x00\x05hello, not a postgres message"
        client.sendall(hello)
        got = b""
        while len(got) < len(hello):
            got += client.recv(65536)
    assert got == hello
    wire = steps.wire()
    assert wire["untracked"] == 1 and wire["unparsed"] == 0
    listener.close()
