"""Steps seen on the wire, and faults at a step (issue 32, items 1 and 2).

Contract:
- A proxy with a `StepWatch` (protocol `redis`, switched on per proxy; off by
  default, when its connections carry no parsing at all) puts a `RespTap` between
  each connection's sockets and its toxic chains. The tap splits client bytes
  into commands and server bytes into replies, pairs them in order, and counts
  one *step* per command: `"<dependency> <VERB> <key pattern> <role>"`, e.g.
  `redis SET order:*:payment app`. MULTI ... EXEC is one step, named by the verbs
  queued inside (`MULTI[SET,RPUSH]EXEC`) and the first queued key; the commands
  in between are not steps of their own.
- Bytes the parser does not understand are forwarded untouched: the connection is
  counted under `unparsed` and from then on passes on the plain path. A connection
  that subscribes or monitors (replies no longer pair with commands) is counted
  under `untracked` and passed on the same way. Parsing never cuts a connection.
- A `Trigger` fires once, at the Nth occurrence of a matching step (a step text,
  `*` as a wildcard), and records what it did (step, pid, time, whether the fault
  verified: the pid died / was stopped):
    before: the command is held (never reaches the server), the owner SIGKILLed,
            the connection cut.
    after:  the command goes on, nothing later from that client is forwarded, the
            reply is delivered, then the owner is SIGKILLed and the connection closed.
    pause:  the reply is delivered, then the owner is SIGSTOPped for `duration_ms`
            and SIGCONTed; the connection carries on.
    error:  the command goes on (it executes), its reply is dropped and the
            connection reset: the client sees a connection error, the effect is done.
- The owner of a connection is the process holding the client's socket, found
  from the client's port via /proc/net/tcp(6) and /proc/<pid>/fd. A trigger whose
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

from harness.toxiproxy.resp import UNTRACKABLE, Command, CommandParser, ReplySplitter, RespError, command_key

PROTOCOLS = ("redis",)
ACTIONS = ("before", "after", "pause", "error")
_VERIFY_TRIES = 40
_VERIFY_EVERY = 0.025


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
class _Pending:
    """A command forwarded and waiting for its reply."""

    identity: str | None  # None: a command inside MULTI ... EXEC, or MULTI itself
    trigger: Trigger | None = None


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


class RespTap:
    """Parses one connection both ways and applies step faults."""

    def __init__(self, watch: StepWatch, connection: TappedConnection, up: Sink, down: Sink) -> None:
        self.watch = watch
        self.connection = connection
        self.up = up
        self.down = down
        self.commands = CommandParser()
        self.replies = ReplySplitter()
        self.pending: deque[_Pending] = deque()
        self.waiting = 0  # pending entries that carry a trigger
        self.multi: list[Command] | None = None
        self.blocked = False  # after a crash/error step: client bytes are dropped
        self.done = False  # a fault ended this connection

    # -- client -> server
    def from_client(self, data: bytes) -> None:
        if self.done or self.blocked:
            return  # a fault ended this connection: later client bytes go nowhere
        try:
            commands = self.commands.feed(data)
        except RespError:
            self._give_up(unparsed=True, pending_up=data)
            return
        for command in commands:
            if _untrackable(command):
                self._give_up(unparsed=False, pending_up=data)
                return
            entry = self._command(command)
            if entry is not None and entry.trigger is not None and entry.trigger.action != "pause":
                self._fire_on_command(entry, data, command)
                return
        self.up.feed(data)

    def _command(self, command: Command) -> _Pending | None:
        """Queue the command's pending reply; the step entry when it is a step."""
        verb = command.verb
        if self.multi is not None:
            if verb == "EXEC":
                queued, self.multi = self.multi, None
                inner = ",".join(cmd.verb for cmd in queued)
                key = command_key(queued[0]) if queued else "-"
                return self._step(self.watch.identity(f"MULTI[{inner}]EXEC", key))
            if verb == "DISCARD":
                self.multi = None
            else:
                self.multi.append(command)
            self.pending.append(_Pending(None))
            return None
        if verb == "MULTI":
            self.multi = []
            self.pending.append(_Pending(None))
            return None
        return self._step(self.watch.identity(verb, command_key(command)))

    def _step(self, identity: str) -> _Pending:
        entry = _Pending(identity, self.watch.seen(identity))
        if entry.trigger is not None and entry.trigger.action != "before":
            self.waiting += 1
        self.pending.append(entry)
        return entry

    def _fire_on_command(self, entry: _Pending, data: bytes, command: Command) -> None:
        trigger = entry.trigger
        assert trigger is not None and entry.identity is not None
        if trigger.action == "before":
            # The command is held: only what came before it goes on (a prefix of
            # it sent in an earlier chunk is harmless, Redis runs complete commands).
            self.pending.pop()
            if command.start > 0:
                self.up.feed(data[: command.start])
            self.done = True
            pid = self._record(trigger, entry.identity)
            self._signal(trigger, pid, signal.SIGKILL)
            self.connection.close(abort=True)
            return
        # after / error: the command goes on, nothing later from this client does.
        self.up.feed(data[: command.end])
        self.blocked = True

    # -- server -> client
    def from_server(self, data: bytes) -> None:
        if self.done:
            return
        try:
            ends = self.replies.feed(data, exact=self.waiting > 0)
        except RespError:
            self._give_up(unparsed=True, pending_down=data)
            return
        start = 0
        for end in ends:
            if not self.pending:
                # More replies than commands (a push, or a reply we did not pair):
                # pairing is lost, the connection passes on untouched.
                self.down.feed(data[start:])
                self._give_up(unparsed=False)
                return
            entry = self.pending.popleft()
            if entry.trigger is None:
                continue
            self.waiting -= 1
            trigger = entry.trigger
            if trigger.action == "error":
                reply_start = self._reply_start(ends, end)
                if reply_start > start:
                    self.down.feed(data[start:reply_start])
                self.done = True
                self._record(trigger, entry.identity or trigger.step, pid=None)
                self.connection.reset()
                return
            self.down.feed(data[start:end])
            start = end
            if trigger.action == "after":
                self.done = True
                pid = self._record(trigger, entry.identity or trigger.step)
                self._signal(trigger, pid, signal.SIGKILL)
                self.connection.close(abort=False)
                return
            pid = self._record(trigger, entry.identity or trigger.step)
            self._pause(trigger, pid)
        if start < len(data):
            self.down.feed(data[start:])

    @staticmethod
    def _reply_start(ends: list[int], end: int) -> int:
        index = ends.index(end)
        return ends[index - 1] if index else 0

    # -- giving up on parsing
    def _give_up(self, *, unparsed: bool, pending_up: bytes = b"", pending_down: bytes = b"") -> None:
        """Forward this connection untouched from now on (the plain path)."""
        if unparsed:
            self.watch.unparsed += 1
        else:
            self.watch.untracked += 1
        self.done = True
        if pending_up:
            self.up.feed(pending_up)
        if pending_down:
            self.down.feed(pending_down)
        self.connection.untap()

    # -- faults
    def _record(self, trigger: Trigger, identity: str, pid: int | None = -1) -> int | None:
        """Note the firing; find the owner (pid=-1: look it up)."""
        if pid == -1:
            pid = self.connection.owner_pid()
        trigger.fired = {"step": identity, "action": trigger.action, "pid": pid, "at": time.time(), "verified": None}
        if trigger.action == "error":
            trigger.fired["verified"] = True  # the reset is the fault itself
        elif pid is None:
            trigger.fired["error"] = "no process owns this connection's client socket"
            trigger.fired["verified"] = False
        elif pid == os.getpid():
            trigger.fired["error"] = "the connection's owner is the proxy's own process: not signalled"
            trigger.fired["verified"] = False
        return pid

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


def _untrackable(command: Command) -> bool:
    verb = command.verb
    if verb in UNTRACKABLE:
        return True
    return verb == "CLIENT" and len(command.args) > 1 and command.args[1].upper() in (b"REPLY", b"TRACKING")


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
