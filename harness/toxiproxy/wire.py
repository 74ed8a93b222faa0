"""What a protocol's parsers give the step tap (harness.toxiproxy.steps): the small
interface between "which bytes are a command, and which step is it" and "where
does its answer end", so that one tap applies step faults to any protocol.

Contract:
- A `ClientSplitter` is fed the client's bytes chunk by chunk and returns every
  `ClientMessage` that chunk completed, in order: its `start` and `end` offsets
  *within that chunk* (a start is negative when the message began in an earlier
  chunk), the step it is (`step`: the identity pieces `(verb, key)`, None when it
  is no step of its own), whether the server answers it with one reply unit
  (`answered`: a Redis command; a PostgreSQL Query, Sync or startup packet), and
  whether the connection can no longer be followed from it on (`untrackable`:
  replies stop pairing with commands). A step message that is not answered itself
  completes at the next answered message (PostgreSQL's Execute, at its Sync).
- A `ServerSplitter` is fed the server's bytes and returns the end offset, within
  the chunk, of each reply unit the chunk completed. With `exact` False the
  offsets may all be len(chunk) (only their number is right); the tap asks for
  exact offsets while a step fault waits for a reply.
- Bytes that are not the protocol raise `WireError` (the tap forwards them
  untouched and stops parsing the connection); a server that switches the
  connection to something else (TLS) raises `Untracked`. Neither ever cuts a
  connection: that is the tap's rule, not the parsers'.
Reply units pair one to one, in order, with answered messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from harness.toxiproxy.errors import ToxiproxyError


class WireError(ToxiproxyError):
    """Bytes that are not the protocol the proxy was told it carries."""


class Untracked(ToxiproxyError):
    """The connection turned into something the parser cannot follow (TLS, replication)."""


@dataclass(frozen=True)
class ClientMessage:
    """One client command or protocol message, located in the chunk that completed it."""

    start: int
    end: int
    step: tuple[str, str] | None = None
    answered: bool = False
    untrackable: bool = False


class ClientSplitter(Protocol):
    """Client -> server bytes into messages (keeps only what is unfinished)."""

    def feed(self, chunk: bytes) -> list[ClientMessage]: ...


class ServerSplitter(Protocol):
    """Server -> client bytes into reply units."""

    def feed(self, chunk: bytes, *, exact: bool) -> list[int]: ...
