"""The PostgreSQL wire protocol (version 3) as a proxy sees it: the frontend's
messages split out of the client's bytes with the step each one is, the
backend's replies located in the server's bytes, and the step identity of a
statement (its verb and table) from a small SQL tokenizer.

Contract:
- `splitters()` gives one connection's `FrontendSplitter` and `BackendSplitter`
  (the interface of harness.toxiproxy.wire); they share what the handshake needs.
- Frontend: first an untyped packet (Int32 length, Int32 code): an SSLRequest or
  GSSENCRequest (the server answers one byte: 'N' and the client carries on in
  plain text, 'S'/'G' and the connection is encrypted: `Untracked` from the
  backend side), a CancelRequest (no answer), or the StartupMessage (answered: its
  reply ends at the first ReadyForQuery, after authentication; password messages
  in between are no steps). A first byte 0x16 (a TLS ClientHello, PostgreSQL 17's
  direct SSL) is `untrackable`. Then typed messages (a type byte, an Int32
  length): Q, P, B, D, E, S, C, H, X, F, d, c, f, p; any other type, or a length
  out of bounds, is `WireError`.
- Steps. A simple Query is one step, answered, its reply ending at ReadyForQuery:
  one statement gives `(VERB, table)`; several (`;`-separated) give their verbs
  joined by `;` and the first table any of them names (`BEGIN;INSERT;COMMIT`,
  `payments`); a Query with no statement is no step. Extended protocol: Parse
  remembers the SQL of a statement name (the unnamed one too; Close forgets it),
  Bind ties a portal to a statement, each Execute is one step, the statement of
  its portal (`-`, `-` when that statement was never seen parsed), and is answered
  at the next Sync (whose ReadyForQuery is where the statement is committed when
  no transaction block is open). FunctionCall and Sync are answered, no steps.
- Backend: typed messages; each ReadyForQuery 'Z' (and each one-byte answer to an
  SSLRequest or GSSENCRequest) ends one reply unit, so reply units pair one to
  one with answered frontend messages. CopyBothResponse 'W' (replication) is
  `Untracked`. Asynchronous messages (notices, parameter status, notifications)
  end nothing.
- `statement_step(sql)`: the tokenizer skips whitespace, `--` and nested `/* */`
  comments, '...' and E'...' strings, "quoted identifiers" (kept as names) and
  $tag$ dollar quotes $tag$. VERB is the statement's first keyword, upper-cased
  (`WITH ...` takes the verb of its main statement; `INSERT ... ON CONFLICT` stays
  INSERT). The table: INSERT INTO t, UPDATE [ONLY] t, DELETE FROM [ONLY] t, MERGE
  INTO t, SELECT ... FROM t (the first FROM at the SELECT's own level; a subquery
  there: its own first FROM), TABLE t, COPY t, TRUNCATE/LOCK [TABLE] t and
  CREATE/ALTER/DROP ... TABLE t; anything else `-`. A name keeps its schema
  (`billing.payments`), unquoted names lower-cased as PostgreSQL folds them; uuids,
  hex ids of 8+ characters and digit runs of 4+ become `*` (partitions, temporary
  tables per request), and at most 80 characters are kept.
- Memory: a message up to 1 MiB is read whole; of a larger one only the first
  64 KiB of its body are looked at (the SQL and names are there), the rest is
  counted past. At most 4096 statement and portal names are remembered (the oldest
  is forgotten first).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from harness.toxiproxy.wire import ClientMessage, Untracked, WireError

PROTOCOL_MAJOR = 3
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

_FRONTEND_TYPES = frozenset(b"QPBDESCHXFdcfp")
_BACKEND_TYPES = frozenset(b"RSKZCETD123nIsNAtGHWdcVv")
_TLS_HANDSHAKE = 0x16
_MAX_STARTUP = 10000  # the server's own limit on a startup packet
_MAX_MESSAGE = 1 << 30  # the server's limit on one message
_READ_WHOLE = 1 << 20
_HEAD = 64 << 10
_MAX_NAMES = 4096
_TABLE_LIMIT = 80
_VERBS_LIMIT = 80

_HEADER = struct.Struct("!BI")  # a typed message's type byte and length

UNKNOWN: tuple[str, str] = ("-", "-")


class PgWireError(WireError):
    """Bytes that are not the PostgreSQL protocol."""


@dataclass
class _Handshake:
    """What the frontend tells the backend side: one-byte answers it should expect."""

    byte_answers: int = 0


def splitters() -> tuple[FrontendSplitter, BackendSplitter]:
    """One connection's pair of splitters."""
    handshake = _Handshake()
    return FrontendSplitter(handshake), BackendSplitter(handshake)


def _cstring(body: bytes | bytearray, start: int = 0) -> tuple[bytes, int]:
    """The NUL-terminated string at `start` and the offset after it (a string cut
    off by the end of a partly read message runs to the end)."""
    end = body.find(b"\0", start)
    if end < 0:
        return bytes(body[start:]), len(body)
    return bytes(body[start:end]), end + 1


def _remember(names: dict[bytes, tuple[str, str] | None], name: bytes, step: tuple[str, str] | None) -> None:
    names.pop(name, None)
    if len(names) >= _MAX_NAMES:
        del names[next(iter(names))]
    names[name] = step


class FrontendSplitter:
    """Client -> server bytes into messages and steps (one connection's state)."""

    def __init__(self, handshake: _Handshake) -> None:
        self._handshake = handshake
        self._startup = True  # the next message is an untyped packet
        self._first = True
        self._fed = 0  # bytes of the stream before the current chunk
        self._head = bytearray()  # the current message's header and the part of its body read
        self._at = 0  # stream offset of the current message's first byte
        self._untyped = False  # the current message is a startup packet (no type byte)
        self._total = 0  # its length with the header (0: header not read yet)
        self._want = 0  # how much of it is read into _head
        self._left = 0  # what is counted past after that
        self._result: tuple[tuple[str, str] | None, bool] | None = None  # (step, answered) once read
        self._statements: dict[bytes, tuple[str, str] | None] = {}
        self._portals: dict[bytes, tuple[str, str] | None] = {}

    def feed(self, chunk: bytes) -> list[ClientMessage]:
        base = self._fed
        self._fed += len(chunk)
        messages: list[ClientMessage] = []
        pos, size = 0, len(chunk)
        while True:
            if self._result is None:
                if not self._head:
                    if pos == size:
                        break
                    self._at = base + pos
                    if self._first and chunk[pos] == _TLS_HANDSHAKE:
                        messages.append(ClientMessage(pos, size, untrackable=True))
                        return messages
                    self._first = False
                header = 8 if self._startup else 5
                need = (self._want if self._total else header) - len(self._head)
                take = min(need, size - pos)
                self._head += chunk[pos : pos + take]
                pos += take
                if take < need:
                    break
                if not self._total:
                    self._header()
                    continue
                self._result = self._startup_packet() if self._untyped else self._typed()
            take = min(self._left, size - pos)
            pos += take
            self._left -= take
            if self._left:
                break
            step, answered = self._result
            messages.append(ClientMessage(self._at - base, pos, step, answered))
            self._head = bytearray()
            self._total = 0
            self._result = None
        return messages

    def _header(self) -> None:
        head = self._head
        if self._startup:
            length = int.from_bytes(head[0:4], "big")
            if not 8 <= length <= _MAX_STARTUP:
                raise PgWireError(f"startup packet of {length} bytes")
            self._untyped = True
            self._total = self._want = length
            self._left = 0
            return
        kind, length = head[0], int.from_bytes(head[1:5], "big")
        if kind not in _FRONTEND_TYPES:
            raise PgWireError(f"unknown frontend message type {bytes([kind])!r}")
        if not 4 <= length <= _MAX_MESSAGE:
            raise PgWireError(f"frontend message of {length} bytes")
        self._untyped = False
        self._total = 1 + length
        self._want = self._total if self._total <= _READ_WHOLE else 5 + _HEAD
        self._left = self._total - self._want

    def _startup_packet(self) -> tuple[tuple[str, str] | None, bool]:
        code = int.from_bytes(self._head[4:8], "big")
        if code in (SSL_REQUEST, GSSENC_REQUEST):
            self._handshake.byte_answers += 1  # the client waits for that byte
            return None, True
        if code == CANCEL_REQUEST:
            return None, False  # the server closes the connection without an answer
        if code >> 16 == PROTOCOL_MAJOR:
            self._startup = False
            return None, True  # answered once authentication is done, at ReadyForQuery
        raise PgWireError(f"unknown startup code {code}")

    def _typed(self) -> tuple[tuple[str, str] | None, bool]:
        kind, body = self._head[0], self._head[5:]
        if kind == 0x51:  # Q
            return statement_step(_cstring(body)[0].decode("utf-8", "replace")), True
        if kind == 0x50:  # P: statement name, SQL
            name, offset = _cstring(body)
            sql = _cstring(body, offset)[0].decode("utf-8", "replace")
            _remember(self._statements, name, statement_step(sql))
        elif kind == 0x42:  # B: portal name, statement name
            portal, offset = _cstring(body)
            statement = _cstring(body, offset)[0]
            _remember(self._portals, portal, self._statements.get(statement, UNKNOWN))
        elif kind == 0x45:  # E: portal name
            portal = _cstring(body)[0]
            return self._portals.get(portal, UNKNOWN), False
        elif kind == 0x43 and body:  # C: 'S' statement or 'P' portal, name
            names = self._statements if body[0] == 0x53 else self._portals
            names.pop(_cstring(body, 1)[0], None)
        elif kind in (0x53, 0x46):  # S Sync, F FunctionCall
            return None, True
        return None, False


class BackendSplitter:
    """Server -> client bytes into reply units, each ending at a ReadyForQuery."""

    def __init__(self, handshake: _Handshake) -> None:
        self._handshake = handshake
        self._head = bytearray()
        self._kind = 0
        self._left = -1  # body bytes still to come of the current message (-1: none begun)

    def feed(self, chunk: bytes, *, exact: bool = True) -> list[int]:
        """End offsets of the reply units `chunk` completes (always exact: the
        message lengths locate them for free)."""
        ends: list[int] = []
        pos, size = 0, len(chunk)
        while True:
            if self._left >= 0:
                take = min(self._left, size - pos)
                pos += take
                self._left -= take
                if self._left:
                    break
                if self._kind == 0x5A:  # Z ReadyForQuery
                    ends.append(pos)
                self._left = -1
                continue
            if pos == size:
                break
            if not self._head and self._handshake.byte_answers:
                answer = chunk[pos]
                pos += 1
                self._handshake.byte_answers -= 1
                if answer == 0x4E:  # 'N': no encryption, the client goes on in plain text
                    ends.append(pos)
                    continue
                if answer in (0x53, 0x47):  # 'S' SSL, 'G' GSSAPI: encrypted from here on
                    raise Untracked("the connection switched to encryption")
                raise PgWireError(f"answer {bytes([answer])!r} to an encryption request")
            if not self._head and size - pos >= 5:
                # The usual case, a header whole in this chunk: read it in place
                # (a result of many rows is as many DataRow messages).
                kind, length = _HEADER.unpack_from(chunk, pos)
                pos += 5
            else:
                take = min(5 - len(self._head), size - pos)
                self._head += chunk[pos : pos + take]
                pos += take
                if len(self._head) < 5:
                    break
                kind, length = _HEADER.unpack_from(self._head)
                self._head.clear()
            if kind not in _BACKEND_TYPES:
                raise PgWireError(f"unknown backend message type {bytes([kind])!r}")
            if not 4 <= length <= _MAX_MESSAGE or (kind == 0x5A and length != 5):
                raise PgWireError(f"backend message {bytes([kind])!r} of {length} bytes")
            if kind == 0x57:  # W CopyBothResponse: streaming replication from here on
                raise Untracked("the connection switched to copy-both (replication)")
            self._kind = kind
            self._left = length - 4
        return ends


# -- statements -------------------------------------------------------------------
_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<line>--[^\n]*)
    | (?P<block>/\*)
    | (?P<estring>[eE]'(?:[^'\\]|\\.|'')*(?:'|\Z))
    | (?P<string>'(?:[^']|'')*(?:'|\Z))
    | (?P<quoted>"(?:[^"]|"")*(?:"|\Z))
    | (?P<param>\$[0-9]+)
    | (?P<dollar>\$(?:[^\W\d][\w]*)?\$)
    | (?P<word>[^\W\d][\w$]*)
    | (?P<number>[0-9][\w.]*)
    | (?P<punct>[();,.])
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_COMMENT_EDGE = re.compile(r"/\*|\*/")
_DML = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "VALUES", "TABLE"})
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"(?=[0-9a-fA-F]*[0-9])[0-9a-fA-F]{8,}")
_DIGITS = re.compile(r"[0-9]{4,}")


@dataclass(frozen=True)
class _Token:
    kind: str  # word, quoted, or one of ( ) ; , .
    text: str

    @property
    def keyword(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


def _tokens(sql: str) -> Iterator[_Token]:
    """Words, quoted identifiers and ( ) ; , . of `sql`; strings, comments,
    numbers, parameters and operators are skipped. An unterminated string or
    comment ends the text."""
    pos, size = 0, len(sql)
    while pos < size:
        match = _TOKEN.match(sql, pos)
        assert match is not None  # `other` matches any character
        kind, pos = match.lastgroup, match.end()
        if kind == "word":
            yield _Token("word", match.group())
        elif kind == "quoted":
            yield _Token("quoted", match.group()[1:-1].replace('""', '"'))
        elif kind == "punct":
            yield _Token(match.group(), match.group())
        elif kind == "block":
            depth = 1
            while depth:
                edge = _COMMENT_EDGE.search(sql, pos)
                if edge is None:
                    return
                depth += 1 if edge.group() == "/*" else -1
                pos = edge.end()
        elif kind == "dollar":
            close = sql.find(match.group(), pos)
            if close < 0:
                return
            pos = close + len(match.group())


def _statements(sql: str) -> list[list[_Token]]:
    statements: list[list[_Token]] = [[]]
    for token in _tokens(sql):
        if token.kind == ";":
            statements.append([])
        else:
            statements[-1].append(token)
    return [statement for statement in statements if statement]


def statement_step(sql: str) -> tuple[str, str] | None:
    """The (verb, table) of a simple Query's or a Parse's SQL; None if it holds no statement."""
    steps = [_classify(statement) for statement in _statements(sql)]
    if not steps:
        return None
    if len(steps) == 1:
        return steps[0]
    verbs = ";".join(verb for verb, _ in steps)
    if len(verbs) > _VERBS_LIMIT:
        verbs = verbs[: _VERBS_LIMIT - 1] + "…"
    table = next((table for _, table in steps if table != "-"), "-")
    return verbs, table


def _classify(tokens: list[_Token]) -> tuple[str, str]:
    start = 0
    while start < len(tokens) and tokens[start].kind == "(":
        start += 1  # (SELECT ...) UNION ...
    if start == len(tokens) or not tokens[start].keyword:
        return UNKNOWN
    verb = tokens[start].keyword
    if verb == "WITH":
        main = _main_of_with(tokens, start + 1)
        if main is None:
            return "WITH", "-"
        start, verb = main, tokens[main].keyword
    return verb, _table(verb, tokens, start + 1)


def _top_level(tokens: list[_Token], index: int) -> Iterator[tuple[int, _Token]]:
    """The tokens from `index` on outside every parenthesis (their positions too), up
    to a closing parenthesis that was not opened here."""
    depth = 0
    for position in range(index, len(tokens)):
        token = tokens[position]
        if token.kind == "(":
            depth += 1
        elif token.kind == ")":
            depth -= 1
            if depth < 0:
                return
        elif depth == 0:
            yield position, token


def _main_of_with(tokens: list[_Token], index: int) -> int | None:
    """The index of the main statement's verb after WITH's common table expressions."""
    return next((position for position, token in _top_level(tokens, index) if token.keyword in _DML), None)


def _skip(tokens: list[_Token], index: int, *keywords: str) -> int:
    while index < len(tokens) and tokens[index].keyword in keywords:
        index += 1
    return index


def _table(verb: str, tokens: list[_Token], index: int) -> str:
    if verb in ("INSERT", "MERGE"):
        return _name(tokens, _skip(tokens, index, "INTO"))
    if verb == "UPDATE":
        return _name(tokens, _skip(tokens, index, "ONLY"))
    if verb == "DELETE":
        return _name(tokens, _skip(tokens, _skip(tokens, index, "FROM"), "ONLY"))
    if verb == "SELECT":
        return _after_from(tokens, index)
    if verb in ("TABLE", "COPY"):
        return _name(tokens, _skip(tokens, index, "ONLY"))
    if verb in ("TRUNCATE", "LOCK"):
        return _name(tokens, _skip(tokens, index, "TABLE", "ONLY"))
    if verb in ("CREATE", "ALTER", "DROP"):
        for position in range(index, min(index + 4, len(tokens))):
            if tokens[position].keyword == "TABLE":
                return _name(tokens, _skip(tokens, position + 1, "IF", "NOT", "EXISTS", "ONLY"))
    return "-"


def _after_from(tokens: list[_Token], index: int) -> str:
    """The table after the first FROM at this level (into a subquery if one is there)."""
    for position, token in _top_level(tokens, index):
        if token.keyword == "FROM":
            after = _skip(tokens, position + 1, "ONLY", "LATERAL")
            if after < len(tokens) and tokens[after].kind == "(":
                inner = _skip_parens(tokens, after)
                if inner < len(tokens) and tokens[inner].keyword in ("SELECT", "WITH"):
                    verb, table = _classify(tokens[inner:])
                    return table if verb == "SELECT" else "-"
                return "-"
            return _name(tokens, after)
    return "-"


def _skip_parens(tokens: list[_Token], index: int) -> int:
    while index < len(tokens) and tokens[index].kind == "(":
        index += 1
    return index


def _name(tokens: list[_Token], index: int) -> str:
    """A possibly schema-qualified name at `index`, as a table pattern ("-" if none)."""
    parts: list[str] = []
    while index < len(tokens) and tokens[index].kind in ("word", "quoted"):
        token = tokens[index]
        parts.append(token.text.lower() if token.kind == "word" else token.text)
        if index + 1 < len(tokens) and tokens[index + 1].kind == ".":
            index += 2
            continue
        break
    if not parts:
        return "-"
    return table_pattern(".".join(parts))


def table_pattern(name: str) -> str:
    """A table name as a stable pattern: uuids, hex ids and long digit runs become `*`."""
    pattern = _DIGITS.sub("*", _HEX.sub("*", _UUID.sub("*", name)))
    return pattern if len(pattern) <= _TABLE_LIMIT else pattern[: _TABLE_LIMIT - 1] + "…"
