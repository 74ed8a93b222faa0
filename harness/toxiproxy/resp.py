"""The Redis protocol as a proxy sees it: client commands split out of a byte
stream, replies counted (and, when asked, located) in the other, and the step
identity of a command.

Contract:
- `CommandParser.feed(chunk)` returns every command completed by `chunk`, each as
  its arguments and its start and end offsets *within that chunk* (a start is
  negative when the command began in an earlier chunk). Commands are RESP arrays
  of bulk strings or inline commands (a line of words); several may share a chunk
  (a pipeline) and one may span many chunks. Anything else raises `RespError`:
  the caller then stops parsing that connection and forwards it untouched.
- `ReplySplitter.feed(chunk, exact=...)` returns how many replies `chunk`
  completed, and with `exact` the end offset of each within the chunk (found by
  feeding hiredis one byte at a time, so only when a step fault waits for a reply).
  RESP2 and RESP3 replies are split by hiredis; a protocol error raises `RespError`.
- `key_pattern(key)` normalises the first key of a command (digit runs, hex ids,
  uuids become `*`), so `order:42:payment` and `order:43:payment` are one step.
- `RedisCommands` is the step tap's client splitter (harness.toxiproxy.wire): every
  command is answered by one reply; MULTI ... EXEC is one step named by the verbs
  queued inside (`MULTI[SET,RPUSH]EXEC`) and the first queued key, MULTI and the
  queued commands are no steps; a command after which replies stop pairing
  (SUBSCRIBE, MONITOR, CLIENT REPLY, ...) is `untrackable`. `ReplySplitter` is its
  server splitter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import hiredis

from harness.toxiproxy.wire import ClientMessage, WireError

# Sanity bounds: past these the stream is not a Redis client's (Redis's own
# limits are 1M+ arguments and 512 MB per bulk; inline lines are capped at 64 KB).
_MAX_ARGS = 1 << 20
_MAX_BULK = 512 << 20
_MAX_INLINE = 64 << 10

_UUID = re.compile(rb"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# A run of 8+ hex characters holding a digit (an id, a hash), then plain digit runs.
_HEX = re.compile(rb"(?=[0-9a-fA-F]*[0-9])[0-9a-fA-F]{8,}")
_DIGITS = re.compile(rb"[0-9]+")
_KEY_LIMIT = 80

# Commands whose first argument is not a key (the step has no key pattern).
KEYLESS = frozenset(
    """
    PING ECHO AUTH HELLO SELECT MULTI EXEC DISCARD QUIT CLIENT INFO CONFIG COMMAND SCRIPT
    FUNCTION FLUSHDB FLUSHALL DBSIZE TIME SCAN KEYS PUBLISH SPUBLISH WAIT WAITAOF RESET EVAL
    EVALSHA EVAL_RO EVALSHA_RO FCALL FCALL_RO READONLY READWRITE CLUSTER DEBUG MEMORY SLOWLOG
    LATENCY ACL SAVE BGSAVE LASTSAVE XREAD XREADGROUP BLMPOP LMPOP ZMPOP BZMPOP SWAPDB ROLE
    """.split()
)
# Commands after which replies no longer pair one-to-one with commands (pushes,
# a subscription's messages, skipped replies): the connection is no longer tracked.
UNTRACKABLE = frozenset({"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR", "SYNC", "PSYNC"})


class RespError(WireError):
    """Bytes that are not the Redis protocol."""


@dataclass(frozen=True)
class Command:
    args: list[bytes]
    start: int  # offset of its first byte in the chunk that completed it (may be < 0)
    end: int  # offset just past its last byte in that chunk

    @property
    def verb(self) -> str:
        return self.args[0].decode("latin-1").upper() if self.args else ""


class CommandParser:
    """Client -> server bytes into commands; keeps only the unfinished command."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[Command]:
        base = len(self._buf)
        buf = self._buf
        buf += chunk
        commands: list[Command] = []
        pos = 0
        size = len(buf)
        while pos < size:
            parsed = _parse_one(buf, pos, size)
            if parsed is None:
                break
            args, end = parsed
            if args:  # an empty inline line or `*0` is no command (Redis skips it)
                commands.append(Command(args, pos - base, end - base))
            pos = end
        del buf[:pos]
        if len(buf) > _MAX_INLINE and buf[:1] != b"*":
            raise RespError("inline command too long")
        return commands


def _line_end(buf: bytearray, pos: int, size: int) -> int | None:
    index = buf.find(b"\r\n", pos, size)
    return None if index < 0 else index


def _number(buf: bytearray, start: int, end: int, limit: int) -> int:
    text = bytes(buf[start:end])
    if not text.isdigit():
        if text == b"-1":
            return -1
        raise RespError(f"bad length {text[:20]!r}")
    value = int(text)
    if value > limit:
        raise RespError("length out of bounds")
    return value


def _parse_one(buf: bytearray, pos: int, size: int) -> tuple[list[bytes], int] | None:
    """One command at `pos`: (args, end) or None when incomplete."""
    if buf[pos] != 0x2A:  # not '*': an inline command, a line of words
        newline = buf.find(b"\n", pos, size)
        if newline < 0:
            return None
        line = bytes(buf[pos:newline]).rstrip(b"\r")
        return line.split(), newline + 1
    eol = _line_end(buf, pos, size)
    if eol is None:
        if size - pos > 32:
            raise RespError("array header too long")
        return None
    count = _number(buf, pos + 1, eol, _MAX_ARGS)
    cursor = eol + 2
    args: list[bytes] = []
    for _ in range(max(count, 0)):
        if cursor >= size:
            return None
        if buf[cursor] != 0x24:  # '$'
            raise RespError("command argument is not a bulk string")
        eol = _line_end(buf, cursor, size)
        if eol is None:
            if size - cursor > 32:
                raise RespError("bulk header too long")
            return None
        length = _number(buf, cursor + 1, eol, _MAX_BULK)
        if length < 0:
            raise RespError("null bulk string in a command")
        start = eol + 2
        if start + length + 2 > size:
            return None
        if buf[start + length : start + length + 2] != b"\r\n":
            raise RespError("bulk string not ended by CRLF")
        args.append(bytes(buf[start : start + length]))
        cursor = start + length + 2
    return args, cursor


class ReplySplitter:
    """Server -> client bytes into replies, by hiredis (RESP2 and RESP3)."""

    def __init__(self) -> None:
        self._incomplete = object()
        self._reader = hiredis.Reader(notEnoughData=self._incomplete)

    def feed(self, chunk: bytes, *, exact: bool) -> list[int]:
        """End offsets of the replies `chunk` completes; without `exact` the list
        has the right length but every offset is len(chunk)."""
        reader = self._reader
        ends: list[int] = []
        try:
            if not exact:
                reader.feed(chunk)
                while reader.gets() is not self._incomplete:
                    ends.append(len(chunk))
                return ends
            for index in range(len(chunk)):
                reader.feed(chunk, index, 1)
                while reader.gets() is not self._incomplete:
                    ends.append(index + 1)
        except hiredis.ProtocolError as exc:
            raise RespError(str(exc)) from None
        return ends


def key_pattern(key: bytes) -> str:
    """The readable, stable form of a key: ids replaced by `*`, at most 80 chars."""
    pattern = _DIGITS.sub(b"*", _HEX.sub(b"*", _UUID.sub(b"*", key)))
    text = pattern.decode("utf-8", "backslashreplace")
    return text if len(text) <= _KEY_LIMIT else text[: _KEY_LIMIT - 1] + "…"


def command_key(command: Command) -> str:
    """The key pattern of a command ("-" when it names no key)."""
    if len(command.args) < 2 or command.verb in KEYLESS:
        return "-"
    return key_pattern(command.args[1])


class RedisCommands:
    """The step tap's client splitter for Redis: commands, their steps, MULTI ... EXEC."""

    def __init__(self) -> None:
        self._parser = CommandParser()
        self._multi: list[Command] | None = None

    def feed(self, chunk: bytes) -> list[ClientMessage]:
        messages: list[ClientMessage] = []
        for command in self._parser.feed(chunk):
            if untrackable(command):
                messages.append(ClientMessage(command.start, command.end, None, answered=True, untrackable=True))
                break
            messages.append(ClientMessage(command.start, command.end, self._step(command), answered=True))
        return messages

    def _step(self, command: Command) -> tuple[str, str] | None:
        verb = command.verb
        if self._multi is not None:
            if verb == "EXEC":
                queued, self._multi = self._multi, None
                inner = ",".join(cmd.verb for cmd in queued)
                return f"MULTI[{inner}]EXEC", command_key(queued[0]) if queued else "-"
            if verb == "DISCARD":
                self._multi = None
            else:
                self._multi.append(command)
            return None
        if verb == "MULTI":
            self._multi = []
            return None
        return verb, command_key(command)


def untrackable(command: Command) -> bool:
    """After this command replies no longer pair one to one with commands."""
    verb = command.verb
    if verb in UNTRACKABLE:
        return True
    return verb == "CLIENT" and len(command.args) > 1 and command.args[1].upper() in (b"REPLY", b"TRACKING")
