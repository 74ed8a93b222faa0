"""The PostgreSQL wire splitting of harness.toxiproxy.pgwire on hand-built byte
messages: a whole client session (SSLRequest, startup, password, simple queries,
the extended protocol with named and unnamed statements, Close, Terminate) split
at every byte and anywhere, the server's replies ending at each ReadyForQuery,
the statement tokenizer's verbs and tables, bytes that are not the protocol
refused (the tap then forwards them untouched; see test_wire_postgres.py), and
the step tap (harness.toxiproxy.steps) on such bytes with a stand-in connection:
where each fault cuts the client's stream and the server's replies."""

from __future__ import annotations

import struct
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.toxiproxy.pgwire import (
    CANCEL_REQUEST,
    SSL_REQUEST,
    BackendSplitter,
    PgWireError,
    splitters,
    statement_step,
    table_pattern,
)
from harness.toxiproxy.steps import StepTap, StepWatch
from harness.toxiproxy.wire import ClientMessage, Untracked


def _msg(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


def _startup(**params: str) -> bytes:
    body = struct.pack("!I", 3 << 16)
    body += b"".join(key.encode() + b"\0" + value.encode() + b"\0" for key, value in params.items()) + b"\0"
    return struct.pack("!I", len(body) + 4) + body


SSL = struct.pack("!II", 8, SSL_REQUEST)
CANCEL = struct.pack("!IIII", 16, CANCEL_REQUEST, 4242, 99)


def _query(sql: str) -> bytes:
    return _msg(b"Q", sql.encode() + b"\0")


def _parse(name: bytes, sql: str) -> bytes:
    return _msg(b"P", name + b"\0" + sql.encode() + b"\0" + struct.pack("!H", 0))


def _bind(portal: bytes, statement: bytes) -> bytes:
    return _msg(b"B", portal + b"\0" + statement + b"\0" + struct.pack("!HHH", 0, 0, 0))


def _execute(portal: bytes = b"") -> bytes:
    return _msg(b"E", portal + b"\0" + struct.pack("!I", 0))


SYNC = _msg(b"S")
INSERT = "INSERT INTO payments (id, amount) VALUES ($1, $2)"

# (message bytes, the step it is, whether the server answers it)
SESSION: list[tuple[bytes, tuple[str, str] | None, bool]] = [
    (SSL, None, True),
    (_startup(user="app", database="shop"), None, True),
    (_msg(b"p", b"secret\0"), None, False),
    (_query("BEGIN"), ("BEGIN", "-"), True),
    (_query("insert into Payments values ('a', 1)"), ("INSERT", "payments"), True),
    (_query("COMMIT"), ("COMMIT", "-"), True),
    # A named statement, executed twice through the unnamed portal.
    (_parse(b"s1", INSERT), None, False),
    (_bind(b"", b"s1"), None, False),
    (_msg(b"D", b"P\0"), None, False),
    (_execute(), ("INSERT", "payments"), False),
    (SYNC, None, True),
    (_bind(b"", b"s1"), None, False),
    (_execute(), ("INSERT", "payments"), False),
    (_msg(b"H"), None, False),
    (SYNC, None, True),
    # The unnamed statement, a named portal, two Executes before one Sync.
    (_parse(b"", "SELECT amount FROM payments WHERE id = $1"), None, False),
    (_bind(b"c1", b""), None, False),
    (_execute(b"c1"), ("SELECT", "payments"), False),
    (_execute(b"c1"), ("SELECT", "payments"), False),
    (SYNC, None, True),
    (_query(""), None, True),  # an empty query: answered (EmptyQueryResponse), no step
    (_query("BEGIN; INSERT INTO payments VALUES ('b', 2); COMMIT;"), ("BEGIN;INSERT;COMMIT", "payments"), True),
    # Closed, then bound again: the statement is no longer known.
    (_msg(b"C", b"Ss1\0"), None, False),
    (_bind(b"", b"s1"), None, False),
    (_execute(), ("-", "-"), False),
    (SYNC, None, True),
    (_msg(b"X"), None, False),
]
STREAM = b"".join(message for message, _, _ in SESSION)
EXPECTED = [(step, answered) for _, step, answered in SESSION]


def _feed_cut(bounds: list[int]) -> list[ClientMessage]:
    frontend, _ = splitters()
    got = []
    for start, end in pairwise(bounds):
        chunk = STREAM[start:end]
        for message in frontend.feed(chunk):
            # The end is within the chunk that completed the message; its start is
            # where it began, counted from that chunk (negative: an earlier one).
            assert 0 < message.end <= len(chunk)
            assert message.start < message.end
            got.append(message)
    return got


def test_a_session_in_one_chunk_is_every_message_with_its_offsets() -> None:
    messages = _feed_cut([0, len(STREAM)])
    assert [(m.step, m.answered) for m in messages] == EXPECTED
    offset = 0
    for (raw, _, _), message in zip(SESSION, messages, strict=True):
        assert (message.start, message.end) == (offset, offset + len(raw))
        offset += len(raw)
    assert not any(m.untrackable for m in messages)


def test_split_at_every_single_byte() -> None:
    messages = _feed_cut(list(range(len(STREAM) + 1)))
    assert [(m.step, m.answered) for m in messages] == EXPECTED
    # Fed a byte at a time, a message ends in the chunk of its last byte and
    # starts len(message) - 1 bytes before it.
    assert [m.end - m.start for m in messages] == [len(raw) for raw, _, _ in SESSION]


@pytest.mark.parametrize("size", [2, 3, 5, 7, 8, 13, 64])
def test_split_in_pieces_of_every_size(size: int) -> None:
    messages = _feed_cut([*range(0, len(STREAM), size), len(STREAM)])
    assert [(m.step, m.answered) for m in messages] == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=8))
def test_split_anywhere_the_same_messages(cuts: list[int]) -> None:
    messages = _feed_cut([0, *sorted(cuts), len(STREAM)])
    assert [(m.step, m.answered) for m in messages] == EXPECTED


def test_a_cancel_request_is_no_step_and_not_answered() -> None:
    frontend, _ = splitters()
    (message,) = frontend.feed(CANCEL)
    assert (message.step, message.answered, message.end) == (None, False, 16)


def test_a_tls_client_hello_first_is_untrackable() -> None:
    frontend, _ = splitters()
    (message,) = frontend.feed(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    assert message.untrackable


def test_large_messages_are_counted_past_and_their_sql_still_read() -> None:
    big_sql = "INSERT INTO big_table VALUES ('" + "x" * (3 << 20) + "')"
    copy_data = _msg(b"d", b"y" * (2 << 20))
    stream = _startup(user="u") + _query(big_sql) + copy_data + _query("SELECT 1")
    frontend, _ = splitters()
    got = []
    for start in range(0, len(stream), 100_000):
        got += [(m.step, m.answered) for m in frontend.feed(stream[start : start + 100_000])]
    assert got == [(None, True), (("INSERT", "big_table"), True), (None, False), (("SELECT", "-"), True)]


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # a length of 1.2 GB: not a startup packet
        struct.pack("!II", 8, 1234),  # an unknown startup code
        struct.pack("!II", 4, 3 << 16),  # a startup packet shorter than its header
        _startup(user="u") + b"?" + struct.pack("!I", 4),  # an unknown message type
        _startup(user="u") + b"Q" + struct.pack("!I", 2),  # a length below its own size
    ],
)
def test_frontend_garbage_is_refused(garbage: bytes) -> None:
    frontend, _ = splitters()
    with pytest.raises(PgWireError):
        frontend.feed(garbage)


# -- the backend ------------------------------------------------------------------
def _z(status: bytes = b"I") -> bytes:
    return _msg(b"Z", status)


REPLIES = [
    b"N",  # the answer to the SSLRequest: no SSL
    _msg(b"R", struct.pack("!I", 0))
    + _msg(b"S", b"server_version\x0015.4\0")
    + _msg(b"K", struct.pack("!II", 1, 2))
    + _z(),
    _msg(b"C", b"BEGIN\0") + _z(b"T"),
    _msg(b"N", b"SNOTICE\0Mhello\0\0") + _msg(b"C", b"INSERT 0 1\0") + _z(b"T"),
    _msg(b"E", b"SERROR\0C23505\0Mduplicate\0\0") + _z(b"E"),
    _msg(b"1") + _msg(b"2") + _msg(b"n") + _msg(b"C", b"INSERT 0 1\0") + _z(),
    _msg(b"1") + _msg(b"2") + _msg(b"T", b"\0\0") + _msg(b"D", b"\0\x01\0\0\0\x011") + _msg(b"s") + _z(),
    _msg(b"I") + _z(),
    _msg(b"A", struct.pack("!I", 7) + b"chan\0payload\0") + _z(),
]
BACKEND = b"".join(REPLIES)


def _backend() -> BackendSplitter:
    frontend, backend = splitters()
    frontend.feed(SSL)  # the backend then expects the one-byte answer
    return backend


def _expected_ends() -> list[int]:
    ends, position = [], 0
    for reply in REPLIES:
        position += len(reply)
        ends.append(position)
    return ends


def test_replies_end_at_each_ready_for_query() -> None:
    assert _backend().feed(BACKEND, exact=True) == _expected_ends()


@given(st.lists(st.integers(min_value=0, max_value=len(BACKEND)), max_size=8))
def test_replies_split_anywhere(cuts: list[int]) -> None:
    backend = _backend()
    bounds = [0, *sorted(cuts), len(BACKEND)]
    ends = []
    for start, end in pairwise(bounds):
        ends += [start + offset for offset in backend.feed(BACKEND[start:end], exact=True)]
    assert ends == _expected_ends()


def test_replies_split_at_every_single_byte() -> None:
    backend = _backend()
    ends = [index + 1 for index in range(len(BACKEND)) if backend.feed(BACKEND[index : index + 1], exact=False)]
    assert ends == _expected_ends()


def test_an_ssl_yes_untracks_the_connection() -> None:
    with pytest.raises(Untracked):
        _backend().feed(b"S\x16\x03\x03", exact=True)


def test_a_notice_is_not_mistaken_for_the_ssl_answer_once_answered() -> None:
    backend = _backend()
    assert backend.feed(b"N", exact=True) == [1]
    notice = _msg(b"N", b"SNOTICE\0\0")
    assert backend.feed(notice + _z(), exact=True) == [len(notice) + 6]


def test_copy_both_untracks_the_connection() -> None:
    _, backend = splitters()
    with pytest.raises(Untracked):
        backend.feed(_msg(b"W", b"\0\0\0"), exact=True)


@pytest.mark.parametrize(
    "garbage",
    [
        b"HTTP/1.1 200 OK\r\n",
        _msg(b"Z", b"II"),  # ReadyForQuery is 5 bytes long
        b"C" + struct.pack("!I", 3),
    ],
)
def test_backend_garbage_is_refused(garbage: bytes) -> None:
    _, backend = splitters()
    with pytest.raises(PgWireError):
        backend.feed(garbage, exact=True)


def test_an_odd_answer_to_the_ssl_request_is_refused() -> None:
    with pytest.raises(PgWireError):
        _backend().feed(b"E", exact=True)


# -- statements -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sql", "step"),
    [
        ("INSERT INTO payments (id) VALUES (1)", ("INSERT", "payments")),
        ("insert into Payments values ($1) on conflict (id) do nothing", ("INSERT", "payments")),
        ('INSERT INTO "Payments" VALUES (1)', ("INSERT", "Payments")),
        ("INSERT INTO billing.payments VALUES (1)", ("INSERT", "billing.payments")),
        ("UPDATE ONLY payments SET amount = amount + 1 WHERE id = $1", ("UPDATE", "payments")),
        ("DELETE FROM payments WHERE id = $1", ("DELETE", "payments")),
        ("MERGE INTO payments p USING staged s ON p.id = s.id WHEN MATCHED THEN DO NOTHING", ("MERGE", "payments")),
        ("SELECT count(*) FROM payments", ("SELECT", "payments")),
        ("SELECT extract(year FROM ts), 'FROM x' AS f FROM payments", ("SELECT", "payments")),
        ("/* FROM a; */ SELECT -- FROM b;\n id FROM payments", ("SELECT", "payments")),
        ("/* outer /* FROM inner */ FROM still a comment */ SELECT x FROM payments", ("SELECT", "payments")),
        ("SELECT $$ FROM x; $$, $tag$ ; FROM y $tag$ FROM payments", ("SELECT", "payments")),
        ("SELECT E'it\\'s FROM x;' FROM payments", ("SELECT", "payments")),
        ("SELECT 'it''s; FROM x' FROM payments", ("SELECT", "payments")),
        ("SELECT \"FROM\" FROM payments", ("SELECT", "payments")),
        ("SELECT * FROM ONLY payments", ("SELECT", "payments")),
        ("SELECT * FROM (SELECT id FROM payments) AS p", ("SELECT", "payments")),
        ("(SELECT a FROM t_one) UNION (SELECT a FROM t_two)", ("SELECT", "t_one")),
        ("SELECT 1", ("SELECT", "-")),
        ("SELECT pg_advisory_lock($1)", ("SELECT", "-")),
        ("select id from payments_20240101 for update", ("SELECT", "payments_*")),
        ("WITH recent AS (SELECT * FROM payments) UPDATE payments SET x = 1 FROM recent", ("UPDATE", "payments")),
        ("WITH ins AS (INSERT INTO audit VALUES (1) RETURNING id) SELECT id FROM ins", ("SELECT", "ins")),
        ("WITH RECURSIVE t(n) AS (VALUES (1) UNION ALL SELECT n + 1 FROM t) SELECT n FROM t", ("SELECT", "t")),
        ("BEGIN", ("BEGIN", "-")),
        ("begin isolation level serializable", ("BEGIN", "-")),
        ("START TRANSACTION", ("START", "-")),
        ("COMMIT", ("COMMIT", "-")),
        ("ROLLBACK TO SAVEPOINT a", ("ROLLBACK", "-")),
        ("CREATE TABLE IF NOT EXISTS payments (id int)", ("CREATE", "payments")),
        ("create temporary table tmp_3f2a9c1e0b4d (id int)", ("CREATE", "tmp_*")),
        ("DROP TABLE IF EXISTS payments", ("DROP", "payments")),
        ("ALTER TABLE ONLY payments ADD COLUMN x int", ("ALTER", "payments")),
        ("CREATE INDEX ON payments (id)", ("CREATE", "-")),
        ("TRUNCATE TABLE payments", ("TRUNCATE", "payments")),
        ("LOCK TABLE payments IN EXCLUSIVE MODE", ("LOCK", "payments")),
        ("COPY payments (id) FROM STDIN", ("COPY", "payments")),
        ("COPY (SELECT 1) TO STDOUT", ("COPY", "-")),
        ("VALUES (1), (2)", ("VALUES", "-")),
        ("SET search_path = billing", ("SET", "-")),
        ("SELECT 'unterminated FROM x", ("SELECT", "-")),
        ("BEGIN; INSERT INTO payments VALUES (1); COMMIT;", ("BEGIN;INSERT;COMMIT", "payments")),
        ("SELECT 1; SELECT 2", ("SELECT;SELECT", "-")),
        ("INSERT INTO payments VALUES (1);", ("INSERT", "payments")),
        ('"quoted" FROM x', ("-", "-")),
    ],
)
def test_statement_steps(sql: str, step: tuple[str, str]) -> None:
    assert statement_step(sql) == step


@pytest.mark.parametrize("sql", ["", "   ", ";", " ; -- nothing\n", "/* only a comment */"])
def test_no_statement_is_no_step(sql: str) -> None:
    assert statement_step(sql) is None


def test_many_statements_keep_a_bounded_name() -> None:
    verb, table = statement_step("INSERT INTO t VALUES (1);" * 100) or ("", "")
    assert len(verb) == 80 and verb.endswith("…") and table == "t"


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("payments", "payments"),
        ("oauth2_tokens", "oauth2_tokens"),
        ("events_2024_01", "events_*_01"),
        ("tmp_3f2a9c1e-0b4d-4e5f-8a6b-7c8d9e0f1a2b", "tmp_*"),
        ("t" * 100, "t" * 79 + "…"),
    ],
)
def test_table_patterns(name: str, pattern: str) -> None:
    assert table_pattern(name) == pattern


# -- the step tap on PostgreSQL bytes -----------------------------------------------
class _Connection:
    """A stand-in for the proxied connection: records what the tap did to it; no
    process owns it, so triggers fire without signalling anyone."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def close(self, *, abort: bool) -> None:
        self.events.append("abort" if abort else "close")

    def reset(self) -> None:
        self.events.append("reset")

    def untap(self) -> None:
        self.events.append("untap")

    def owner_pid(self) -> int | None:
        return None


class _Sink:
    def __init__(self) -> None:
        self.data = b""

    def feed(self, data: bytes) -> None:
        self.data += data


READY = _msg(b"R", struct.pack("!I", 0)) + _msg(b"K", struct.pack("!II", 1, 2)) + _z()
INSERT_DONE = _msg(b"1") + _msg(b"2") + _msg(b"C", b"INSERT 0 1\0") + _z()


def _tap(*triggers: dict[str, object]) -> tuple[StepTap, StepWatch, _Connection, _Sink, _Sink]:
    watch = StepWatch("db", "postgres", "service")
    for trigger in triggers:
        watch.arm(trigger)
    connection, up, down = _Connection(), _Sink(), _Sink()
    tap = StepTap(watch, connection, up, down)
    tap.from_client(_startup(user="u"))
    tap.from_server(READY)
    assert up.data == _startup(user="u") and down.data == READY
    up.data = down.data = b""
    return tap, watch, connection, up, down


def _insert(number: int) -> bytes:
    return _parse(b"", INSERT) + _bind(b"", b"") + _execute()


def test_the_startup_is_no_step_and_an_after_waits_for_the_sync_of_its_execute() -> None:
    tap, watch, connection, up, down = _tap({"action": "after", "step": "db INSERT payments service"})
    tap.from_client(_insert(1))  # the Sync comes in a later chunk
    assert up.data == _insert(1)
    tap.from_client(SYNC + _query("SELECT 1"))
    assert up.data == _insert(1) + SYNC  # the round goes on, nothing after it
    tap.from_client(_query("SELECT 2"))
    assert up.data == _insert(1) + SYNC
    tap.from_server(INSERT_DONE)
    assert down.data == INSERT_DONE and connection.events == ["close"]
    assert watch.steps == {"db INSERT payments service": 1}
    (trigger,) = watch.triggers
    assert trigger.fired is not None and trigger.fired["step"] == "db INSERT payments service"


def test_before_the_second_execute_of_a_pipeline_holds_it_and_everything_after() -> None:
    tap, watch, connection, up, down = _tap({"action": "before", "step": "db INSERT *", "occurrence": 2})
    first, second = _insert(1), _insert(2)
    prefix = first + _parse(b"", INSERT) + _bind(b"", b"")
    tap.from_client(first + second + SYNC)
    assert up.data == prefix and connection.events == ["abort"]
    assert watch.steps == {"db INSERT payments service": 2}


def test_error_drops_a_reply_that_arrives_in_pieces() -> None:
    tap, watch, connection, up, down = _tap({"action": "error", "step": "db INSERT *"})
    tap.from_client(_query("SELECT 1") + _insert(1) + SYNC)
    select_reply = _msg(b"C", b"SELECT 1\0") + _z()
    tap.from_server(select_reply + INSERT_DONE[:7])
    tap.from_server(INSERT_DONE[7:-6])
    assert down.data == select_reply and connection.events == []
    tap.from_server(INSERT_DONE[-6:])
    assert down.data == select_reply and connection.events == ["reset"]
    assert watch.triggers[0].fired is not None


def test_a_second_trigger_in_a_round_another_one_ended_is_recorded_as_not_fired() -> None:
    tap, watch, connection, up, down = _tap(
        {"action": "after", "step": "db INSERT *"}, {"action": "after", "step": "db SELECT *"}
    )
    select = _parse(b"", "SELECT id FROM payments") + _bind(b"", b"") + _execute()
    tap.from_client(_insert(1) + select + SYNC)
    tap.from_server(INSERT_DONE)
    first, second = watch.triggers
    assert first.fired is not None and first.fired["step"] == "db INSERT payments service"
    assert second.fired is not None and second.fired["verified"] is False
    assert "another trigger" in second.fired["error"]


def test_a_pause_lets_the_connection_carry_on() -> None:
    tap, watch, connection, up, down = _tap({"action": "pause", "step": "db INSERT *", "duration_ms": 50})
    tap.from_client(_insert(1) + SYNC)
    tap.from_server(INSERT_DONE)
    tap.from_client(_query("COMMIT"))
    assert up.data == _insert(1) + SYNC + _query("COMMIT") and down.data == INSERT_DONE
    assert connection.events == []
    assert watch.steps == {"db INSERT payments service": 1, "db COMMIT - service": 1}


def test_garbage_from_the_server_is_forwarded_and_the_connection_untapped() -> None:
    tap, watch, connection, up, down = _tap()
    tap.from_server(b"\x00garbage")
    assert down.data == b"\x00garbage" and connection.events == ["untap"] and watch.unparsed == 1
