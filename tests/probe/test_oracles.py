"""Oracles that count effects: the `effects:` config, the SQL oracle on SQLite and on a
real PostgreSQL (read-only, with a timeout, failures named), the HTTP oracle against a
small server, and the three effect invariants on hand-built histories."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from harness.probe.checker import check
from harness.probe.config import EffectsSpec, ProbeConfigError, parse_config
from harness.probe.effect_checks import EffectRecord, binding
from harness.probe.oracles import OracleError, open_oracle
from harness.probe.oracles.sql import psycopg_query
from tests.support.postgres import PostgresDatabase

BODY = {"amount": "{int:1-9}", "ref": "{uuid}"}


def endpoint(effects: Any, **extra: Any) -> dict[str, Any]:
    return {"name": "pay", "path": "/p", "body": BODY, "id": {"pointer": "/id"}, "effects": effects, **extra}


def effects_spec(effects: Any) -> EffectsSpec:
    spec = parse_config({"endpoints": [endpoint(effects)]}).endpoints[0].effects
    assert spec is not None
    return spec


# --- config ------------------------------------------------------------------------------

@pytest.mark.parametrize(("effects", "message"), [
    ({"path": "/p?k={key}"}, "endpoints[0].effects: needs exactly one of count, items"),
    ({"path": "/p?k={key}", "count": "/n", "items": "/i"}, "endpoints[0].effects: needs exactly one of count"),
    ({"path": "/p", "count": "/n"}, "endpoints[0].effects.path: needs a parameter"),
    ({"path": "/p?k={nope}", "count": "/n"}, "endpoints[0].effects.path: parameter 'nope' is neither"),
    ({"path": "/p?k={key}", "count": "n"}, "endpoints[0].effects.count: must be a JSON pointer"),
    ({"dsn": "mysql://x", "query": "select 1 where :key"}, "endpoints[0].effects.dsn: must be a postgresql://"),
    ({"dsn": "sqlite:///x.db"}, "endpoints[0].effects.query: must be an SQL query"),
    ({"dsn": "sqlite:///x.db", "query": "SELECT 1"}, "endpoints[0].effects.query: needs a parameter"),
    ({"dsn": "sqlite:///x.db", "query": "SELECT id FROM t WHERE x = :amount::int AND y = :who"},
     "endpoints[0].effects.query: parameter 'who' is neither"),
    ({"dsn": "sqlite:///x.db", "query": "q :key", "path": "/p"}, "endpoints[0].effects: is either SQL"),
    ({"dsn": "sqlite:///x.db", "query": "q :key", "timeout": "0s"}, "endpoints[0].effects.timeout: must be longer"),
    ({"dsn": "sqlite:///x.db", "query": "q :key", "rows": 1}, "endpoints[0].effects: unknown key(s) rows"),
    ({}, "endpoints[0].effects: needs path (HTTP) or dsn and query (SQL)"),
])
def test_effects_errors_name_the_field(effects: Any, message: str) -> None:
    with pytest.raises(ProbeConfigError) as error:
        parse_config({"endpoints": [endpoint(effects)]}, source="p.yaml")
    assert str(error.value).startswith(f"p.yaml: {message}"), str(error.value)


def test_effects_parameters_and_round_trip() -> None:
    sql = effects_spec({"dsn": "postgresql://u@h:1/d", "query": "SELECT id FROM t WHERE r = :ref::text AND k = :key"})
    assert sql.kind == "sql" and sql.params == ("ref", "key") and sql.timeout == 5.0
    http = effects_spec({"path": "/p?k={key}&r={ref}", "items": "/items"})
    assert http.kind == "http" and http.params == ("key", "ref")
    config = parse_config({"endpoints": [endpoint({"dsn": "sqlite:///x.db", "query": "q :key", "timeout": "2s"})]})
    assert parse_config(config.to_dict()) == config
    assert psycopg_query("SELECT '50%' WHERE a = :key AND b = :ref::text") == \
        "SELECT '50%%' WHERE a = %(key)s AND b = %(ref)s::text"


def test_a_binding_is_the_requests_values() -> None:
    spec = effects_spec({"dsn": "sqlite:///x.db", "query": "q :key :ref :id"})
    op = {"type": "ok", "idempotency_key": "k", "resource_id": "r1", "body": {"ref": "x", "amount": 3}}
    assert binding(op, spec) == (("key", "k"), ("ref", "x"), ("id", "r1"))
    assert binding({**op, "type": "info"}, spec) is None  # no id without a 2xx
    assert binding({**op, "idempotency_key": None}, spec) is None


# --- SQL on SQLite -------------------------------------------------------------------------

@pytest.fixture
def sqlite_db(tmp_path: Path) -> str:
    path = tmp_path / "service.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE payments (id TEXT, key TEXT)")
        connection.executemany("INSERT INTO payments VALUES (?, ?)", [("p1", "k1"), ("p2", "k1"), ("p3", "k2")])
    return f"sqlite:///{path}"


def test_sqlite_oracle_counts_rows_or_a_count(sqlite_db: str) -> None:
    rows = open_oracle("pay", effects_spec({"dsn": sqlite_db, "query": "SELECT id FROM payments WHERE key = :key"}),
                       upstream="127.0.0.1:9")
    assert rows.count({"key": "k1"}, {}).ids == ("p1", "p2") and rows.count({"key": "k9"}, {}).count == 0
    counted = open_oracle("pay", effects_spec(
        {"dsn": sqlite_db, "query": "SELECT count(*) AS count FROM payments WHERE key = :key"}), upstream="x:1")
    assert counted.count({"key": "k1"}, {}).count == 2 and counted.count({"key": "k1"}, {}).ids is None
    rows.close()
    counted.close()


@pytest.mark.parametrize(("query", "says"), [
    ("DELETE FROM payments WHERE key = :key", "readonly"),
    ("SELECT nope FROM payments WHERE key = :key", "no such column"),
    ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r WHERE :key = :key",
     "interrupted"),
])
def test_sqlite_oracle_is_read_only_bounded_and_named_when_it_fails(sqlite_db: str, query: str, says: str) -> None:
    oracle = open_oracle("pay", effects_spec({"dsn": sqlite_db, "query": query, "timeout": "0.3s"}), upstream="x:1")
    with pytest.raises(OracleError) as error:
        oracle.count({"key": "k1"}, {})
    assert str(error.value).startswith(f"effects of pay: query {query!r} failed")
    assert says in str(error.value).lower()
    with sqlite3.connect(sqlite_db.removeprefix("sqlite:///")) as connection:
        assert connection.execute("SELECT count(*) FROM payments").fetchone() == (3,)


# --- SQL on PostgreSQL ----------------------------------------------------------------------

@pytest.fixture
def pg_payments(postgres_db: PostgresDatabase) -> str:
    with psycopg.connect(postgres_db.dsn, autocommit=True) as connection:
        connection.execute("CREATE TABLE payments (id text, key text, amount integer)")
        connection.execute("INSERT INTO payments VALUES ('p1', 'k1', 5), ('p2', 'k1', 6), ('p3', 'k2', 5)")
    return postgres_db.dsn


def test_postgres_oracle_counts_with_named_parameters(pg_payments: str) -> None:
    rows = open_oracle("pay", effects_spec({"dsn": pg_payments, "query":
                                            "SELECT id FROM payments WHERE key = :key AND amount = :amount::int "
                                            "ORDER BY id"}), upstream="x:1")
    assert rows.count({"key": "k1", "amount": 5}, {}).ids == ("p1",)
    counted = open_oracle("pay", effects_spec({"dsn": pg_payments, "query":
                                               "SELECT count(*) FROM payments WHERE key = :key"}), upstream="x:1")
    assert counted.count({"key": "k1"}, {}).count == 2
    rows.close()
    counted.close()


@pytest.mark.parametrize(("query", "says"), [
    ("DELETE FROM payments WHERE key = :key", "read-only transaction"),
    ("SELECT pg_sleep(5) WHERE :key::text IS NOT NULL", "statement timeout"),
    ("SELECT nope FROM payments WHERE key = :key", "does not exist"),
])
def test_postgres_oracle_is_read_only_bounded_and_named_when_it_fails(pg_payments: str, query: str,
                                                                      says: str) -> None:
    oracle = open_oracle("pay", effects_spec({"dsn": pg_payments, "query": query, "timeout": "0.3s"}), upstream="x:1")
    with pytest.raises(OracleError) as error:
        oracle.count({"key": "k1"}, {})
    assert str(error.value).startswith(f"effects of pay: query {query!r} failed") and says in str(error.value)
    with psycopg.connect(pg_payments) as connection:
        assert connection.execute("SELECT count(*) FROM payments").fetchone() == (3,)
    # The oracle is usable again after a failure (a fresh connection).
    good = open_oracle("pay", effects_spec({"dsn": pg_payments, "query": "SELECT id FROM payments WHERE key = :key"}),
                       upstream="x:1")
    assert good.count({"key": "k2"}, {}).count == 1
    good.close()


def test_an_unreachable_database_is_an_oracle_error() -> None:
    oracle = open_oracle("pay", effects_spec({"dsn": "postgresql://postgres@127.0.0.1:9/x",
                                              "query": "SELECT 1 WHERE :key = :key"}), upstream="x:1")
    with pytest.raises(OracleError, match=r"^effects of pay: query .* failed: OperationalError"):
        oracle.count({"key": "k"}, {})


# --- HTTP --------------------------------------------------------------------------------------

@pytest.fixture
def http_upstream() -> Iterator[str]:
    """/count?key=K answers {"n": ...} for Bearer alice's K; /items?key=K a list; /broken 500."""
    data = {("Bearer alice", "k1"): ["p1", "p2"], ("Bearer bob", "k1"): ["p3"]}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            url = urlsplit(self.path)
            key = parse_qs(url.query).get("key", [""])[0]
            found = data.get((self.headers.get("Authorization", ""), key), [])
            if url.path == "/broken":
                self.send_response(500)
                self.end_headers()
                return
            body = {"n": len(found)} if url.path == "/count" else {"items": [{"id": i} for i in found]}
            raw = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_oracle_asks_as_the_identity(http_upstream: str) -> None:
    counted = open_oracle("pay", effects_spec({"path": "/count?key={key}", "count": "/n"}), upstream=http_upstream)
    assert counted.per_identity
    assert counted.count({"key": "k1"}, {"Authorization": "Bearer alice"}).count == 2
    assert counted.count({"key": "k1"}, {"Authorization": "Bearer bob"}).count == 1
    items = open_oracle("pay", effects_spec({"path": "/items?key={key}", "items": "/items"}), upstream=http_upstream)
    assert items.count({"key": "k1"}, {"Authorization": "Bearer alice"}).ids == ("p1", "p2")
    broken = open_oracle("pay", effects_spec({"path": "/broken?key={key}", "count": "/n"}), upstream=http_upstream)
    with pytest.raises(OracleError, match=r"^effects of pay: GET http://.*/broken\?key=k1 answered 500"):
        broken.count({"key": "k1"}, {})
    wrong = open_oracle("pay", effects_spec({"path": "/items?key={key}", "count": "/n"}), upstream=http_upstream)
    with pytest.raises(OracleError, match="no count at '/n'"):
        wrong.count({"key": "k1"}, {})
    for oracle in (counted, items, broken, wrong):
        oracle.close()


# --- the effect invariants ------------------------------------------------------------------------

CONFIG = parse_config({"identities": [{"Authorization": "Bearer a"}, {"Authorization": "Bearer b"}],
                       "endpoints": [endpoint({"dsn": "sqlite:///x.db", "query": "q :ref"})]})


def op(ref: str, identity: int, kind: str = "first", type: str = "ok", *, key: str | None = "k1",
       payload: str = "f1", rid: str | None = "r1", status: int | None = None) -> dict[str, Any]:
    return {"op": "create_order", "op_id": f"{ref}-{identity}-{kind}-{type}", "type": type, "endpoint": "pay",
            "idempotency_key": key, "identity": identity, "expect": kind, "fingerprint": payload,
            "status": status or {"ok": 201, "fail": 422, "info": None}[type], "body": {"ref": ref},
            "resource_id": rid if type == "ok" else None, "body_digest": f"d-{rid}"}


def record(ref: str, count: int, identity: int | None = None) -> EffectRecord:
    return EffectRecord(endpoint="pay", params={"ref": ref}, identity=identity, count=count)


def judged(ops: list[dict[str, Any]], records: list[EffectRecord]) -> dict[str, Any]:
    result = check(ops, CONFIG, effects=records, min_acknowledged=1)
    return {inv.name: inv for inv in result.invariants}


def test_the_effects_of_a_correct_service_pass() -> None:
    ops = [op("x", 0), op("x", 0, "replay"), op("x", 1, "other_identity", rid="r2"),
           op("y", 0, "payload_mismatch", "fail", payload="f2"), op("z", 0, "missing_key", "fail", key=None, status=400)]
    found = judged(ops, [record("x", 2), record("y", 0), record("z", 0)])
    assert all(found[name].passed for name in ("one_effect_per_key", "acknowledged_effect_present",
                                                "refused_no_effect"))
    assert (found["one_effect_per_key"].checked, found["refused_no_effect"].checked) == (1, 2)


def test_a_second_effect_behind_one_answer_is_found() -> None:
    found = judged([op("x", 0), op("x", 0, "replay")], [record("x", 2)])
    assert "2 effects for 1 identity(ies) (at most 1)" in found["one_effect_per_key"].violations[0]["message"]


def test_an_acknowledged_request_without_its_effect_is_found() -> None:
    # Bob's 2xx replayed Alice's answer: one payment for two acknowledged identities.
    found = judged([op("x", 0), op("x", 1, "other_identity")], [record("x", 1)])
    assert "2 identity(ies) got a 2xx but the service holds 1 effect(s)" in \
        found["acknowledged_effect_present"].violations[0]["message"]
    per_identity = judged([op("x", 0)], [record("x", 0, identity=0)])
    assert not per_identity["acknowledged_effect_present"].passed


def test_an_effect_of_a_refused_request_is_found() -> None:
    ops = [op("y", 0, "payload_mismatch", "fail", payload="f2"), op("z", 1, "missing_key", "fail", key=None, status=400),
           op("w", 0, "payload_mismatch", "info", payload="f3")]
    found = judged(ops, [record("y", 1), record("z", 1), record("w", 1)])
    messages = [v["message"] for v in found["refused_no_effect"].violations]
    assert len(messages) == 3 and "of a request that must be refused (payload_mismatch)" in messages[0]
    assert "(missing_key)" in messages[1]


def test_cli_refuses_bad_effects_in_one_line_without_a_run_directory(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli.main import main

    path = tmp_path / "probe.yaml"
    path.write_text("endpoints:\n  - {path: /p, body: {a: '{uuid}'}, id: {pointer: /id},\n"
                    "     effects: {dsn: 'mysql://x', query: 'SELECT 1 WHERE :a'}}\n")
    out = tmp_path / "run"
    assert main(["probe", "--config", str(path), "--upstream", "127.0.0.1:9", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"harness: {path}: endpoints[0].effects.dsn: must be a postgresql://") and "\n" not in err
    assert not out.exists()


def test_a_query_by_key_alone_counts_a_mismatch_with_its_key() -> None:
    """docs/probe.md's two forms: by `:key` alone a reused key's requests are one binding,
    so an executed mismatch is the key's second effect (`one_effect_per_key`) and
    `refused_no_effect` judges nothing; by `:key` and the mutated field the mismatch has
    a binding of its own and its effect breaks `refused_no_effect`."""
    def ops(amounts: tuple[int, int]) -> list[dict[str, Any]]:
        first = {**op("x", 0), "identity": None, "body": {"ref": "x", "amount": amounts[0]}}
        mismatch = {**op("x", 0, "payload_mismatch", "fail", payload="f2"), "identity": None,
                    "body": {"ref": "x", "amount": amounts[1]}}
        return [first, {**first, "expect": "replay", "op_id": "replay"}, mismatch]

    by_key = parse_config({"endpoints": [endpoint({"dsn": "sqlite:///x.db", "query": "q :key"})]})
    record = EffectRecord(endpoint="pay", params={"key": "k1"}, identity=None, count=2)
    found = {inv.name: inv for inv in check(ops((5, 6)), by_key, effects=[record], min_acknowledged=1).invariants}
    assert not found["one_effect_per_key"].passed
    assert found["refused_no_effect"].passed and found["refused_no_effect"].checked == 0
    by_field = parse_config({"endpoints": [endpoint({"dsn": "sqlite:///x.db", "query": "q :key :amount"})]})
    records = [EffectRecord(endpoint="pay", params={"key": "k1", "amount": 5}, identity=None, count=1),
               EffectRecord(endpoint="pay", params={"key": "k1", "amount": 6}, identity=None, count=1)]
    found = {inv.name: inv for inv in check(ops((5, 6)), by_field, effects=records, min_acknowledged=1).invariants}
    assert found["one_effect_per_key"].passed and not found["refused_no_effect"].passed
