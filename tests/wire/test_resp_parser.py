"""The RESP parsing of harness.toxiproxy.resp on fixed byte sequences: commands
(arrays of bulk strings, inline, pipelines, split at every byte), replies split
by hiredis (RESP2 and RESP3), key patterns, and garbage refused (the tap then
forwards it untouched; see test_wire_steps.py)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.toxiproxy.resp import CommandParser, ReplySplitter, RespError, command_key, key_pattern


def _resp(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in args)


PIPELINE = (
    _resp(b"MULTI")
    + _resp(b"SET", b"order:42:payment", b"x\r\ny")
    + _resp(b"RPUSH", b"queue", b"")
    + _resp(b"EXEC")
    + b"PING\r\n"
    + _resp(b"GET", b"k")
)
PIPELINE_ARGS = [
    [b"MULTI"],
    [b"SET", b"order:42:payment", b"x\r\ny"],
    [b"RPUSH", b"queue", b""],
    [b"EXEC"],
    [b"PING"],
    [b"GET", b"k"],
]


def test_a_pipeline_in_one_chunk_is_every_command_with_its_offsets() -> None:
    commands = CommandParser().feed(PIPELINE)
    assert [c.args for c in commands] == PIPELINE_ARGS
    assert commands[0].start == 0 and commands[-1].end == len(PIPELINE)
    for before, after in pairwise(commands):
        assert before.end == after.start
    assert PIPELINE[commands[1].start : commands[1].end] == _resp(b"SET", b"order:42:payment", b"x\r\ny")


def test_inline_commands_and_empty_lines() -> None:
    commands = CommandParser().feed(b"\r\nset  a 1\nINCR a\r\n")
    assert [c.args for c in commands] == [[b"set", b"a", b"1"], [b"INCR", b"a"]]
    assert commands[0].verb == "SET"


@given(st.lists(st.integers(min_value=0, max_value=len(PIPELINE)), max_size=6))
def test_split_anywhere_the_same_commands(cuts: list[int]) -> None:
    parser = CommandParser()
    bounds = [0, *sorted(cuts), len(PIPELINE)]
    got = []
    for start, end in pairwise(bounds):
        chunk = PIPELINE[start:end]
        for command in parser.feed(chunk):
            # The end offset is within the chunk that completed the command.
            assert 0 < command.end <= len(chunk)
            got.append(command.args)
    assert got == PIPELINE_ARGS


def test_split_at_every_single_byte() -> None:
    parser = CommandParser()
    got = [c.args for i in range(len(PIPELINE)) for c in parser.feed(PIPELINE[i : i + 1])]
    assert got == PIPELINE_ARGS


@pytest.mark.parametrize(
    "garbage",
    [b"*2\r\n:1\r\n:2\r\n", b"*x\r\n", b"*1\r\n$3\r\nabcd\r\n", b"*1\r\n$-1\r\n", b"*" + b"9" * 40, b"a" * 70000],
)
def test_garbage_is_refused(garbage: bytes) -> None:
    with pytest.raises(RespError):
        CommandParser().feed(garbage)


REPLIES = [
    b"+OK\r\n",
    b"-ERR wrong\r\n",
    b":42\r\n",
    b"$5\r\nhe\r\nl\r\n",
    b"$-1\r\n",
    b"*2\r\n+QUEUED\r\n*1\r\n:1\r\n",
    b"*-1\r\n",
    # RESP3: a map, a set, a double, a boolean false, null, a big number, verbatim, a push.
    b"%2\r\n+a\r\n:1\r\n$1\r\nb\r\n#t\r\n",
    b"~2\r\n:1\r\n:2\r\n",
    b",3.5\r\n",
    b"#f\r\n",
    b"_\r\n",
    b"(12345678901234567890\r\n",
    b"=7\r\ntxt:abc\r\n",
    b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n",
]
STREAM = b"".join(REPLIES)


def test_replies_counted_and_located_by_hiredis() -> None:
    assert len(ReplySplitter().feed(STREAM, exact=False)) == len(REPLIES)
    ends = ReplySplitter().feed(STREAM, exact=True)
    expected, position = [], 0
    for reply in REPLIES:
        position += len(reply)
        expected.append(position)
    assert ends == expected


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=6), st.booleans())
def test_replies_split_anywhere(cuts: list[int], exact: bool) -> None:
    splitter = ReplySplitter()
    bounds = [0, *sorted(cuts), len(STREAM)]
    count = sum(len(splitter.feed(STREAM[a:b], exact=exact)) for a, b in pairwise(bounds))
    assert count == len(REPLIES)


def test_a_reply_that_is_not_resp_is_refused() -> None:
    with pytest.raises(RespError):
        ReplySplitter().feed(b"HTTP/1.1 200 OK\r\n", exact=False)


@pytest.mark.parametrize(
    ("key", "pattern"),
    [
        (b"order:42:payment", "order:*:payment"),
        (b"idem:3f2a9c1e-0b4d-4e5f-8a6b-7c8d9e0f1a2b", "idem:*"),
        (b"charge:deadbeef42cafe:v2", "charge:*:v*"),
        (b"feed", "feed"),  # a word made of hex letters, no digit: kept
        (b"x" * 200, "x" * 79 + "…"),
    ],
)
def test_key_patterns(key: bytes, pattern: str) -> None:
    assert key_pattern(key) == pattern


def test_keyless_commands_have_no_pattern() -> None:
    (ping, incr) = CommandParser().feed(_resp(b"PING", b"hello") + _resp(b"incr", b"n:1"))
    assert command_key(ping) == "-"
    assert command_key(incr) == "n:*"
