"""The shared PostgreSQL fixture (tests/support/postgres.py): a real cluster on a free
loopback port, one fresh database per test, nothing left behind after a stop."""

from __future__ import annotations

import socket
from pathlib import Path

import psycopg
import pytest

from harness.ports import free_port
from harness.process_handle import pid_alive
from tests.support import postgres as pg


def test_each_test_gets_an_empty_database_of_its_own(postgres_db: pg.PostgresDatabase,
                                                      postgres_server: pg.PostgresServer) -> None:
    assert postgres_db.host == "127.0.0.1" and postgres_db.port == postgres_server.port
    assert postgres_db.address == f"127.0.0.1:{postgres_server.port}"
    with psycopg.connect(postgres_db.dsn) as connection:
        assert connection.execute("select current_database()").fetchone() == (postgres_db.name,)
        tables = connection.execute("select count(*) from pg_tables where schemaname = 'public'").fetchone()
        assert tables == (0,)
        connection.execute("create table charges (key text primary key)")
        connection.execute("insert into charges values ('k1')")


def test_a_database_is_dropped_after_its_test(postgres_server: pg.PostgresServer) -> None:
    database = postgres_server.create_database("fixture_drop_check")
    with psycopg.connect(database.dsn) as connection:
        connection.execute("create table t (x int)")
    postgres_server.drop_database(database.name)
    with psycopg.connect(postgres_server.dsn) as connection:
        names = {row[0] for row in connection.execute("select datname from pg_database")}
    assert "fixture_drop_check" not in names


@pytest.mark.slow
def test_a_server_of_its_own_stops_and_leaves_no_folder() -> None:
    server = pg.PostgresServer()
    server.start()
    root = server.root
    assert root is not None and (root / "data" / "PG_VERSION").read_text().strip() == "15"
    process = server.process
    assert process is not None
    with psycopg.connect(server.dsn) as connection:
        assert connection.execute("show fsync").fetchone() == ("off",)
    server.stop()
    assert not pid_alive(process.pid)
    assert not Path(root).exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(server.dsn, connect_timeout=2)


@pytest.mark.slow
def test_a_server_whose_port_was_taken_meanwhile_starts_on_a_fresh_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # A port picked free stays free only until someone binds it; initdb takes seconds
    # on a busy machine. The first pick here is a port this test holds.
    picks: list[int] = []

    def first_pick_taken(host: str) -> int:
        picks.append(held.getsockname()[1] if not picks else free_port(host))
        return picks[-1]

    with socket.socket() as held:
        held.bind((pg.HOST, free_port(pg.HOST)))
        held.listen()
        monkeypatch.setattr(pg, "free_port", first_pick_taken)
        server = pg.PostgresServer()
        try:
            server.start()
            assert len(picks) == 2 and server.port == picks[1] != held.getsockname()[1], picks
            assert pg.PORT_TAKEN in server.log_path.read_text()  # the first start did fail on it
            with psycopg.connect(server.dsn) as connection:
                assert connection.execute("select 1").fetchone() == (1,)
        finally:
            server.stop()


def test_missing_binaries_fail_with_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(pg, "BIN_DIR", tmp_path / "nowhere")
    with pytest.raises(pg.PostgresNotAvailable, match=r"PostgreSQL is not installed: run scripts/setup.sh"):
        pg.PostgresServer().start()
