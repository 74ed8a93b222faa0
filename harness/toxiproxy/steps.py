"""Steps seen on the wire, and faults at a step (issue 32, items 1 and 2).

Contract:
- A proxy with a `StepWatch` (a protocol of PROTOCOLS, `redis` or `postgres`,
  switched on per proxy; off by default, when its connections carry no parsing at
  all) puts a `StepTap` between each connection's sockets and its toxic chains.
  The tap feeds client bytes to the protocol's client splitter and server bytes to
  its server splitter (the interface of harness.toxiproxy.wire: resp.py for
  Redis, pgwire.py for PostgreSQL), pairs answered client messages with reply
  units in order, and counts one *step* per step message:
  `"<dependency> <VERB> <key or table pattern> <role>"`, e.g.
  `redis SET order:*:payment app` or `db INSERT payments service`.
- A *round* is the client's messages up to one the server answers (a Redis
  command; a PostgreSQL Query, or the Parse/Bind/Execute... up to a Sync). A
  step's reply is its round's reply: a PostgreSQL Execute completes at the
  ReadyForQuery after its Sync.
- Bytes the parser does not understand are forwarded untouched: the connection is
  counted under `unparsed` and from then on passes on the plain path. A connection
  whose replies stop pairing with its commands (Redis: subscribes or monitors;
  PostgreSQL: switches to TLS or replication) is counted under `untracked` and
  passed on the same way. Parsing never cuts a connection.
- A `Trigger` fires once, at the Nth occurrence of a matching step (a step text,
  `*` as a wildcard), and records what it did (step, pid, time `at_us` in unix
  microseconds, whether the fault verified: the pid died / was stopped):
    before: the step's message is held (never reaches the server; what came
            before it in its chunk does), the owner SIGKILLed, the connection cut.
    after:  the step's round goes on, nothing later from that client is
            forwarded, the reply is delivered, then the owner is SIGKILLed and
            the connection closed.
    pause:  the reply is delivered, then the owner is SIGSTOPped for `duration_ms`
            and SIGCONTed; the connection carries on.
    error:  the round goes on (it executes), its reply is dropped (none of it
            reaches the client) and the connection reset: the client sees a
            connection error, the effect is done.
  A trigger that matched a step whose reply it will never see (another trigger
  ended the connection first, or parsing stopped) records why, verified false.
- The owner of a connection is the process holding the client's socket, found
  from the client's port via /proc/net/tcp(6) and /proc/<pid>/fd, when a trigger
  matches its step (an `after` step's client may close the socket as soon as it
  has the reply). A trigger whose
  owner cannot be found, or is this process, records an error and signals nobody.
Step faults act where the tap sits, before the downstream toxics: a toxic that
holds the reply (latency) may still hold it when the owner is killed.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.toxiproxy import pgwire
from harness.toxiproxy.resp import RedisCommands, ReplySplitter
from harness.toxiproxy.wire import ClientMessage, ClientSplitter, ServerSplitter, Untracked, WireError

PROTOCOLS = ("redis", "postgres")
ACTIONS = ("before", "after", "pause", "error")
_VERIFY_TRIES = 40
_VERIFY_EVERY = 0.025
_ENDED_BY_ANOTHER = "another trigger ended the connection before this step's reply"


class StepConfigError(ValueError):
    """A step watch or trigger asked for with bad fields (the API answers 400)."""


def _step_regex(pattern: str) -> re.Pattern[str]:
    # Only `*` is a wildcard: identities hold brackets (MULTI[SET]EXEC), and a `*`
    # of a key pattern still matches itself.
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


@dataclass
class Trigger:
    """A one-shot step fault."""

    id: int
    action: str
    step: str
    occurrence: int = 1
    duration_ms: int = 0
    seen: int = 0
    fired: dict[str, Any] | None = None
    _regex: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._regex = _step_regex(self.step)

    def matches(self, identity: str) -> bool:
        if self.fired is not None or not self._regex.fullmatch(identity):
            return False
        self.seen += 1
        return self.seen == self.occurrence

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "action": self.action,
            "step": self.step,
            "occurrence": self.occurrence,
            "duration_ms": self.duration_ms,
            "seen": self.seen,
            "fired": self.fired,
        }


def parse_trigger(body: Any, trigger_id: int) -> Trigger:
    if not isinstance(body, dict):
        raise StepConfigError("a trigger is a JSON object")
    action, step = body.get("action"), body.get("step")
    if action not in ACTIONS:
        raise StepConfigError(f"action must be one of {', '.join(ACTIONS)}")
    if not isinstance(step, str) or not step:
        raise StepConfigError("step must be a non-empty string")
    occurrence, duration = body.get("occurrence", 1), body.get("duration_ms", 0)
    if not isinstance(occurrence, int) or isinstance(occurrence, bool) or occurrence < 1:
        raise StepConfigError("occurrence must be an integer >= 1")
    if not isinstance(duration, int) or isinstance(duration, bool) or duration < 0:
        raise StepConfigError("duration_ms must be an integer >= 0")
    if action == "pause" and duration == 0:
        raise StepConfigError("a pause needs duration_ms > 0")
    return Trigger(trigger_id, action, step, occurrence, duration)


class StepWatch:
    """One proxy's protocol, sender role, step counts and triggers."""

    def __init__(self, dependency: str, protocol: str, role: str) -> None:
        if protocol not in PROTOCOLS:
            raise StepConfigError(f"unknown protocol {protocol!r} (known: {', '.join(PROTOCOLS)})")
        if not role or any(ch.isspace() for ch in role):
            raise StepConfigError("role must be a non-empty word")
        self.dependency = dependency
        self.protocol = protocol
        self.role = role
        self.steps: dict[str, int] = {}
        self.unparsed = 0  # connections whose bytes the parser gave up on
        self.untracked = 0  # connections that subscribed or monitored
        self.triggers: list[Trigger] = []
        self._next_id = 1

    def identity(self, verb: str, key: str) -> str:
        return f"{self.dependency} {verb} {key} {self.role}"

    def arm(self, body: Any) -> Trigger:
        trigger = parse_trigger(body, self._next_id)
        self._next_id += 1
        self.triggers.append(trigger)
        return trigger

    def disarm(self, trigger_id: int) -> None:
        """Take back a trigger that has not matched a step yet (ValueError: no such
        trigger; StepConfigError: it matched, and fires or fired: its record stays)."""
        for trigger in self.triggers:
            if trigger.id == trigger_id:
                if trigger.fired is not None or trigger.seen >= trigger.occurrence:
                    raise StepConfigError(f"trigger {trigger_id} matched its step: its record stays")
                self.triggers.remove(trigger)
                return
        raise ValueError(trigger_id)

    def seen(self, identity: str) -> Trigger | None:
        """Count a step; the trigger it fires, if any."""
        self.steps[identity] = self.steps.get(identity, 0) + 1
        for trigger in self.triggers:
            if trigger.matches(identity):
                return trigger
        return None

    def reset_steps(self) -> None:
        self.steps.clear()
        self.unparsed = self.untracked = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "dependency": self.dependency,
            "protocol": self.protocol,
            "role": self.role,
            "steps": dict(sorted(self.steps.items())),
            "unparsed": self.unparsed,
            "untracked": self.untracked,
            "triggers": [trigger.to_json() for trigger in self.triggers],
        }


# -- owner of a connection ---------------------------------------------------------
def _socket_inode(client_port: int, proxy_port: int) -> str | None:
    """The inode of the client's socket: local port = client_port, remote = proxy_port."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as handle:
                next(handle, None)
                for line in handle:
                    fields = line.split()
                    local, remote = fields[1], fields[2]
                    if (
                        int(local.rsplit(":", 1)[1], 16) == client_port
                        and int(remote.rsplit(":", 1)[1], 16) == proxy_port
                    ):
                        return fields[9]
        except OSError:
            continue
    return None


def owner_pid(client_port: int, proxy_port: int) -> int | None:
    """The pid holding the client end of a proxied connection, or None."""
    inode = _socket_inode(client_port, proxy_port)
    if inode is None or inode == "0":
        return None
    target = f"socket:[{inode}]"
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                try:
                    if os.readlink(fd.path) == target:
                        return int(entry.name)
                except OSError:
                    continue
        except OSError:
            continue
    return None


def process_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat ('R', 'S', 'T', 'Z', ...), '' if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


# -- the tap on one connection ----------------------------------------------------
@dataclass
class _Round:
    """Client messages up to one that the server answers, and the steps among them."""

    triggers: list[tuple[Trigger, str]] = field(default_factory=list)


class Sink(Protocol):
    """Where the tap passes bytes on (a harness.toxiproxy.link.Direction)."""

    def feed(self, data: bytes) -> None: ...


class TappedConnection(Protocol):
    """What the tap uses of its connection (harness.toxiproxy.link.Connection is
    one). Declared here so that link imports steps and never the other way round."""

    def close(self, *, abort: bool) -> None: ...

    def reset(self) -> None: ...

    def untap(self) -> None: ...

    def owner_pid(self) -> int | None: ...


def protocol_splitters(protocol: str) -> tuple[ClientSplitter, ServerSplitter]:
    """A fresh pair of parsers for one connection of `protocol` (one of PROTOCOLS)."""
    if protocol == "redis":
        return RedisCommands(), ReplySplitter()
    if protocol == "postgres":
        return pgwire.splitters()
    raise StepConfigError(f"unknown protocol {protocol!r}")


class StepTap:
    """Parses one connection both ways (the watch's protocol) and applies step faults."""

    def __init__(self, watch: StepWatch, connection: TappedConnection, up: Sink, down: Sink) -> None:
        self.watch = watch
        self.connection = connection
        self.up = up
        self.down = down
        self.commands, self.replies = protocol_splitters(watch.protocol)
        self.round = _Round()  # messages sent whose answered message has not come yet
        self.pending: deque[_Round] = deque()  # rounds forwarded, waiting for their reply
        self.waiting = 0  # pending rounds that carry a trigger
        self.closing = False  # an after/error step seen: forward to the end of its round, then block
        self.blocked = False  # after a crash/error step: client bytes are dropped
        self.done = False  # a fault ended this connection
        self._owner: int | None = None  # the client's pid, looked up once a trigger matched
        self._owner_known = False

    # -- client -> server
    def from_client(self, data: bytes) -> None:
        if self.done or self.blocked:
            return  # a fault ended this connection: later client bytes go nowhere
        try:
            messages = self.commands.feed(data)
        except WireError:
            self._give_up(unparsed=True, pending_up=data)
            return
        for message in messages:
            if message.untrackable:
                self._give_up(unparsed=False, pending_up=data)
                return
            if message.step is not None:
                identity = self.watch.identity(*message.step)
                trigger = self.watch.seen(identity)
                if trigger is not None and trigger.action == "before":
                    self._fire_before(trigger, identity, data, message)
                    return
                if trigger is not None:
                    # The owner is looked up now, while the client surely holds its socket:
                    # once the reply is delivered it may close the connection at once.
                    self._owner_pid()
                    self.round.triggers.append((trigger, identity))
                    self.closing = self.closing or trigger.action != "pause"
            if message.answered:
                if self.round.triggers:
                    self.waiting += 1
                self.pending.append(self.round)
                self.round = _Round()
                if self.closing:
                    # The round that holds an after/error step goes on whole (what
                    # the client sent before awaiting its reply), nothing after it.
                    self.up.feed(data[: message.end])
                    self.blocked = True
                    return
        self.up.feed(data)

    def _fire_before(self, trigger: Trigger, identity: str, data: bytes, message: ClientMessage) -> None:
        # The message is held: only what came before it goes on (a prefix of it
        # sent in an earlier chunk is harmless: servers run complete messages).
        if message.start > 0:
            self.up.feed(data[: message.start])
        self.done = True
        self._abandon_all()
        pid = self._record(trigger, identity)
        self._signal(trigger, pid, signal.SIGKILL)
        self.connection.close(abort=True)

    # -- server -> client
    def from_server(self, data: bytes) -> None:
        if self.done:
            return
        try:
            ends = self.replies.feed(data, exact=self.waiting > 0)
        except WireError:
            self._give_up(unparsed=True, pending_down=data)
            return
        except Untracked:
            self._give_up(unparsed=False, pending_down=data)
            return
        start = 0
        previous = 0  # where the reply that ends at `end` begins in this chunk
        for end in ends:
            if not self.pending:
                # More replies than commands (a push, or a reply we did not pair):
                # pairing is lost, the connection passes on untouched.
                self.down.feed(data[start:])
                self._give_up(unparsed=False)
                return
            round_ = self.pending.popleft()
            reply_start, previous = previous, end
            if not round_.triggers:
                continue
            self.waiting -= 1
            if self._fire_on_reply(round_, data, start, reply_start, end):
                return
            start = end
        # What follows the last complete reply begins the next one: held back too
        # when that is a reply an `error` step drops.
        stop = previous if self._reply_dropped() else len(data)
        if start < stop:
            self.down.feed(data[start:stop])

    def _fire_on_reply(self, round_: _Round, data: bytes, start: int, reply_start: int, end: int) -> bool:
        """Apply a round's triggers once its reply is complete; True if that ended the connection."""
        delivered = False
        for index, (trigger, identity) in enumerate(round_.triggers):
            if trigger.action == "error":
                if not delivered and reply_start > start:
                    self.down.feed(data[start:reply_start])
                self.done = True
                self._abandon(round_.triggers[index + 1 :])
                self._abandon_all()
                self._record(trigger, identity, pid=None)
                self.connection.reset()
                return True
            if not delivered:
                self.down.feed(data[start:end])
                delivered = True
            pid = self._record(trigger, identity)
            if trigger.action == "after":
                self.done = True
                self._abandon(round_.triggers[index + 1 :])
                self._abandon_all()
                self._signal(trigger, pid, signal.SIGKILL)
                self.connection.close(abort=False)
                return True
            self._pause(trigger, pid)
        return False

    def _reply_dropped(self) -> bool:
        """The reply now arriving is one an `error` step drops: its first bytes go
        nowhere either (the client must not see a part of it)."""
        return bool(self.pending) and any(trigger.action == "error" for trigger, _ in self.pending[0].triggers)

    # -- giving up on parsing
    def _give_up(self, *, unparsed: bool, pending_up: bytes = b"", pending_down: bytes = b"") -> None:
        """Forward this connection untouched from now on (the plain path)."""
        if unparsed:
            self.watch.unparsed += 1
        else:
            self.watch.untracked += 1
        self.done = True
        self._abandon_all("the connection stopped being parsed before this step's reply")
        if pending_up:
            self.up.feed(pending_up)
        if pending_down:
            self.down.feed(pending_down)
        self.connection.untap()

    # -- faults
    def _abandon_all(self, reason: str = _ENDED_BY_ANOTHER) -> None:
        for round_ in (*self.pending, self.round):
            self._abandon(round_.triggers, reason)

    @staticmethod
    def _abandon(triggers: list[tuple[Trigger, str]], reason: str = _ENDED_BY_ANOTHER) -> None:
        """Triggers that matched a step whose reply they will never see: recorded
        as not verified, with why, so that none waits unfired forever."""
        for trigger, identity in triggers:
            if trigger.fired is None:
                trigger.fired = {
                    "step": identity,
                    "action": trigger.action,
                    "pid": None,
                    "at": time.time(),
                    "at_us": time.time_ns() // 1000,
                    "verified": False,
                    "error": reason,
                }
        triggers.clear()

    def _record(self, trigger: Trigger, identity: str, pid: int | None = -1) -> int | None:
        """Note the firing; find the owner (pid=-1: look it up)."""
        if pid == -1:
            pid = self._owner_pid()
        # `at_us` (unix microseconds, an int): the API prints floats as Go's float32, to
        # about 100 s on a unix time; `at` stays for readers of the old field.
        now = time.time_ns()
        trigger.fired = {"step": identity, "action": trigger.action, "pid": pid, "at": now / 1e9,
                         "at_us": now // 1000, "verified": None}
        if trigger.action == "error":
            trigger.fired["verified"] = True  # the reset is the fault itself
        elif pid is None:
            trigger.fired["error"] = "no process owns this connection's client socket"
            trigger.fired["verified"] = False
        elif pid == os.getpid():
            trigger.fired["error"] = "the connection's owner is the proxy's own process: not signalled"
            trigger.fired["verified"] = False
        return pid

    def _owner_pid(self) -> int | None:
        """The connection's owner, looked up once (it does not change)."""
        if not self._owner_known:
            self._owner = self.connection.owner_pid()
            self._owner_known = self._owner is not None
        return self._owner

    def _signal(self, trigger: Trigger, pid: int | None, signum: signal.Signals) -> bool:
        assert trigger.fired is not None
        if pid is None or pid == os.getpid():
            return False
        try:
            os.kill(pid, signum)
        except OSError as exc:
            trigger.fired["error"] = f"kill({pid}, {signum.name}): {exc.strerror}"
            trigger.fired["verified"] = False
            return False
        wanted = ("", "Z", "X") if signum == signal.SIGKILL else ("T", "t")
        _verify(trigger.fired, pid, wanted, _VERIFY_TRIES)
        return True

    def _pause(self, trigger: Trigger, pid: int | None) -> None:
        if not self._signal(trigger, pid, signal.SIGSTOP):
            return
        assert pid is not None and trigger.fired is not None
        fired = trigger.fired

        def resume() -> None:
            try:
                os.kill(pid, signal.SIGCONT)
                fired["resumed_at"] = time.time()
            except OSError as exc:
                fired["error"] = f"kill({pid}, SIGCONT): {exc.strerror}"

        asyncio.get_running_loop().call_later(trigger.duration_ms / 1000, resume)


def _verify(fired: dict[str, Any], pid: int, wanted: tuple[str, ...], tries: int) -> None:
    """Set fired['verified'] once /proc shows the pid in a wanted state (a signal
    is delivered asynchronously, so this polls a little)."""
    if process_state(pid) in wanted:
        fired["verified"] = True
        return
    if tries <= 0:
        fired["verified"] = False
        return
    asyncio.get_running_loop().call_later(_VERIFY_EVERY, _verify, fired, pid, wanted, tries - 1)
