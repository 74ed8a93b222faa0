"""Crash points: named step boundaries where a fault can be injected at run time.

Each point sits between two steps of one layer (the list is `POINTS`; docs/target-app.md
says what state a crash at each one leaves). Code passes a point with
`crash_points.reach("consumer.after_effect")`. A point is off until it is armed with an
action, through the internal endpoints only (routes/internal.py):
- `crash`: the process ends at once with SIGKILL (no cleanup, no `finally`, no reply);
- `error`: `CrashPointError` is raised there, a transient failure: the API answers it
  503 (the Idempotency-Key layer releases the key), the consumer leaves the entry
  pending and counts nothing against it (like a Redis error);
- `delay`: the process sleeps `delay_ms` there, then goes on;
- `drop-reply` (only at points after the work is done): `reach` returns True and the
  caller drops its answer: the API closes the connection without a response
  (`drop_reply`), the consumer never acknowledges the entry.
An armed point fires with `probability` on each reach, at most `count` times in all
(None: unbounded), counted across every process of the stack.

Shared state: a folder (TARGET_APP_CRASH_POINTS_DIR) that every gunicorn worker and
every consumer of a stack sees. A folder rather than Redis because plans kill,
pause and cut off the stack's Redis: a point armed there would vanish or stall with
it, and a crash point must keep firing while Redis is down. In the folder:
- `armed.json`: `{"points": {name: arming}}`, replaced whole (write + rename) by the
  arming side under an flock on `lock`, so readers never see half a file;
- `hits.jsonl`: one JSON line per firing, appended (O_APPEND) *before* the action
  runs, so a crash is on record even though the process is gone;
- `fired-<arming id>`: one byte appended per firing of a counted arming; the file
  offset after the append is the firing's ordinal across all processes (O_APPEND
  appends are atomic on a local file system), so `count` needs no lock.
Free when off: `reach` is a dictionary lookup and a clock read (`time.monotonic`,
no system call); at most every `POLL_SECONDS` one `stat` of `armed.json` tells
whether the armed set changed. An arming reaches every process within that time;
a disarming at once: an armed point looks at the file again before it fires, so no
process fires after a disarm has returned.
Without a folder (the variable unset) every point is off for good, arming is
refused (`CrashPointsDisabled`) and disarming does nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import random
import signal
import socket
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from target_app.errors import TargetAppError

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

    from target_app.settings import Settings

log = logging.getLogger(__name__)

ENV_DIR = "TARGET_APP_CRASH_POINTS_DIR"
ACTIONS = ("crash", "error", "delay", "drop-reply")
LAYERS = ("api", "domain", "webhook", "message")
PROCESSES = ("app", "consumer")
POLL_SECONDS = 0.1
ARMED_FILE = "armed.json"
HITS_FILE = "hits.jsonl"
LOCK_FILE = "lock"
MAX_DELAY_MS = 600_000

_BEFORE_WORK = ("crash", "error", "delay")
_AFTER_WORK = ("crash", "error", "delay", "drop-reply")


class CrashPointError(TargetAppError):
    """The transient failure an armed `error` point raises (503 / entry left pending)."""


class CrashPointsDisabled(TargetAppError):
    """Arming was asked of an app that has no crash-point folder."""


class UnknownCrashPoint(TargetAppError):
    """No crash point has this name."""


class InvalidArming(TargetAppError):
    """An arming request with a bad field; `field` names it."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


@dataclass(frozen=True)
class PointSpec:
    """One crash point: where it is and what a crash there leaves."""

    name: str
    layer: str
    process: str
    description: str
    actions: tuple[str, ...]


def _spec(name: str, layer: str, process: str, actions: tuple[str, ...], description: str) -> PointSpec:
    return PointSpec(name, layer, process, description, actions)


POINTS: Mapping[str, PointSpec] = MappingProxyType({spec.name: spec for spec in (
    _spec("api.after_claim", "api", "app", _BEFORE_WORK,
          "the Idempotency-Key is claimed (in flight, with its lease) and the handler has not "
          "run: the key blocks retries (409 + Retry-After) until the lease ends, then runs anew"),
    _spec("api.after_domain", "api", "app", _BEFORE_WORK,
          "the handler's effect is committed (order with its recovery point, or payment) and "
          "the answer is not stored: the key stays in flight until its lease ends; a retry "
          "then finds the recovery point or the domain guard"),
    _spec("api.after_store", "api", "app", _AFTER_WORK,
          "the answer is stored under the key and not yet sent: the client gets nothing, "
          "its retry gets the stored answer replayed"),
    _spec("domain.after_create", "domain", "app", _BEFORE_WORK,
          "the order script ran (stock reserved, order and recovery point written) and "
          "nothing is answered yet"),
    _spec("domain.after_guard", "domain", "app", _BEFORE_WORK,
          "mark_paid's guard decided and its outcome is written (the order PAID with its "
          "payment, or nothing) and the reply has not left the domain"),
    _spec("webhook.after_verify", "webhook", "app", _BEFORE_WORK,
          "the webhook's signature is verified and nothing is applied: the provider's "
          "retry applies it"),
    _spec("webhook.after_apply", "webhook", "app", _AFTER_WORK,
          "the webhook's payment is applied and the answer not sent: the provider's "
          "retry meets the domain guard (already paid)"),
    _spec("consumer.after_read", "message", "consumer", _BEFORE_WORK,
          "an entry is delivered to this consumer (pending in its name) and nothing is "
          "applied: it is reclaimed after the reclaim idle time"),
    _spec("consumer.after_reclaim", "message", "consumer", _BEFORE_WORK,
          "idle entries were taken over with XAUTOCLAIM and none is handled yet (reached "
          "only when something was reclaimed): they are reclaimed again later"),
    _spec("consumer.after_effect", "message", "consumer", _BEFORE_WORK,
          "the message's effect is applied (with the inbox, in the same script as its "
          "processed-mark) and the entry is not acknowledged: its redelivery is a duplicate"),
    _spec("consumer.after_inbox_mark", "message", "consumer", _AFTER_WORK,
          "the effect and the processed-mark are written and the entry is not acknowledged: "
          "its redelivery is skipped as a duplicate"),
    _spec("consumer.after_ack", "message", "consumer", _BEFORE_WORK,
          "the entry is acknowledged (after its effect): nothing is left to redo"),
)})


@dataclass(frozen=True)
class Arming:
    """How one point is armed (shared by all processes through armed.json)."""

    action: str
    probability: float = 1.0
    count: int | None = None
    delay_ms: int = 0
    id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "probability": self.probability, "count": self.count,
                "delay_ms": self.delay_ms}

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> Arming:
        return cls(action=str(data["action"]), probability=float(data["probability"]),
                   count=None if data.get("count") is None else int(data["count"]),
                   delay_ms=int(data.get("delay_ms", 0)), id=str(data["id"]))


@dataclass(frozen=True)
class Hit:
    """One firing of a point, as hits.jsonl records it."""

    name: str
    action: str
    process: str
    pid: int
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "action": self.action, "process": self.process,
                "pid": self.pid, "at": self.at}


def parse_arming(name: str, document: Mapping[str, object]) -> Arming:
    """A PUT body as an Arming for point `name`; InvalidArming names the bad field."""
    spec = POINTS.get(name)
    if spec is None:
        raise UnknownCrashPoint(name)
    for field in document:
        if field not in ("action", "probability", "count", "delay_ms"):
            raise InvalidArming(field, "is not a field of an arming (action, probability, count, delay_ms)")
    action = document.get("action")
    if not isinstance(action, str) or action not in ACTIONS:
        raise InvalidArming("action", f"must be one of {', '.join(ACTIONS)}")
    if action not in spec.actions:
        raise InvalidArming("action", f"{name} takes {', '.join(spec.actions)}, not {action}")
    probability = document.get("probability", 1.0)
    if isinstance(probability, bool) or not isinstance(probability, (int, float)) \
            or not math.isfinite(probability) or not 0 < probability <= 1:
        raise InvalidArming("probability", "must be a number in (0, 1]")
    count = document.get("count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise InvalidArming("count", "must be an integer >= 1, or null (unbounded)")
    delay_ms = document.get("delay_ms", 0)
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or not 0 <= delay_ms <= MAX_DELAY_MS:
        raise InvalidArming("delay_ms", f"must be an integer in [0, {MAX_DELAY_MS}]")
    if action == "delay" and delay_ms == 0:
        raise InvalidArming("delay_ms", "is required and must be > 0 for action delay")
    return Arming(action, float(probability), count, delay_ms, uuid.uuid4().hex)


def drop_reply(environ: WSGIEnvironment) -> None:
    """Close the request's connection without a response (gunicorn, or Werkzeug's
    server): the client sees the connection end; what the app then returns is
    written nowhere (the server ignores the broken pipe)."""
    for key in ("gunicorn.socket", "werkzeug.socket"):
        sock = environ.get(key)
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            return
    log.warning("drop-reply: no connection socket in the environ; the reply is sent")


class CrashPoints:
    """One process's view of the crash points (see the module docstring)."""

    def __init__(self, directory: Path | None, process: str, *, seed: int | None = None) -> None:
        if process not in PROCESSES:
            raise ValueError(f"unknown process kind {process!r}")
        self.directory = directory
        self.process = process
        self._armed: dict[str, Arming] = {}
        self._next_poll = 0.0
        self._seen: tuple[int, int] | None = None
        self._exhausted: set[str] = set()
        self._rng = random.Random(seed)
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)

    @classmethod
    def for_settings(cls, settings: Settings, process: str) -> CrashPoints:
        """The points of one process of the app (`app` or `consumer`)."""
        return cls(Path(settings.crash_points_dir) if settings.crash_points_dir else None, process)

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    # --- the hot path --------------------------------------------------------------

    def reach(self, name: str) -> bool:
        """Pass point `name`: nothing unless it is armed. True means drop the reply."""
        if self.directory is None:
            return False
        if time.monotonic() >= self._next_poll:
            self._refresh()
        arming = self._armed.get(name)
        if arming is None:
            return False
        return self._fire(name, arming)

    def _refresh(self) -> None:
        assert self.directory is not None
        self._next_poll = time.monotonic() + POLL_SECONDS
        try:
            st = os.stat(self.directory / ARMED_FILE)
        except FileNotFoundError:
            self._armed, self._seen = {}, None
            return
        seen = (st.st_ino, st.st_mtime_ns)
        if seen != self._seen:
            self._armed = self._read_armed()
            self._seen = seen

    def _fire(self, name: str, arming: Arming) -> bool:
        if arming.probability < 1.0 and self._rng.random() >= arming.probability:
            return False
        # The time first, then a fresh look at armed.json: a hit on record was still
        # armed after its time, so it is never later than the disarming. (With only the
        # POLL_SECONDS look, a process fired up to 0.1 s after a disarm had returned,
        # and a window's log missed a hit the point's count had.)
        at = time.time()
        self._refresh()
        if self._armed.get(name) != arming:
            return False
        if arming.count is not None and not self._take_one(arming):
            return False
        self._record(Hit(name, arming.action, self.process, os.getpid(), at))
        if arming.action == "crash":
            log.warning("crash point %s: crashing (SIGKILL)", name)
            os.kill(os.getpid(), signal.SIGKILL)
            os._exit(137)  # not reached: SIGKILL cannot be caught
        if arming.action == "error":
            raise CrashPointError(f"crash point {name}: injected transient error")
        if arming.action == "delay":
            time.sleep(arming.delay_ms / 1000.0)
            return False
        return arming.action == "drop-reply"

    def _take_one(self, arming: Arming) -> bool:
        """One of the arming's `count` firings, or False once all are taken."""
        assert self.directory is not None and arming.count is not None
        if arming.id in self._exhausted:
            return False
        fd = os.open(self.directory / f"fired-{arming.id}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"x")
            ordinal = os.lseek(fd, 0, os.SEEK_CUR)
        finally:
            os.close(fd)
        if ordinal >= arming.count:
            self._exhausted.add(arming.id)
        return ordinal <= arming.count

    def _record(self, hit: Hit) -> None:
        assert self.directory is not None
        line = json.dumps(hit.to_json(), separators=(",", ":")).encode() + b"\n"
        fd = os.open(self.directory / HITS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # in the kernel's hands before any action: survives SIGKILL
        finally:
            os.close(fd)

    # --- the arming side (internal endpoints) ----------------------------------------

    def arm(self, name: str, document: Mapping[str, object]) -> dict[str, Any]:
        """Arm `name` from a PUT body; its entry as read back from the shared folder."""
        arming = parse_arming(name, document)
        with self._locked() as directory:
            armed = self._read_armed()
            armed[name] = arming
            self._write_armed(directory, armed)
        self._next_poll = 0.0  # this process sees it on its next reach
        return self.entry(name)

    def disarm(self, name: str) -> dict[str, Any]:
        if name not in POINTS:
            raise UnknownCrashPoint(name)
        if self.directory is None:
            return self.entry(name)  # nothing can be armed: nothing to disarm
        with self._locked() as directory:
            armed = self._read_armed()
            if armed.pop(name, None) is not None:
                self._write_armed(directory, armed)
        self._next_poll = 0.0
        return self.entry(name)

    def disarm_all(self) -> list[dict[str, Any]]:
        if self.directory is None:
            return self.entries()
        with self._locked() as directory:
            self._write_armed(directory, {})
        self._next_poll = 0.0
        return self.entries()

    def entry(self, name: str) -> dict[str, Any]:
        if name not in POINTS:
            raise UnknownCrashPoint(name)
        return self._entries(self._read_armed(), self._hit_counts(), [name])[0]

    def entries(self) -> list[dict[str, Any]]:
        return self._entries(self._read_armed(), self._hit_counts(), list(POINTS))

    def hits(self) -> list[Hit]:
        """Every firing so far, oldest first (a line cut short by a full disk is skipped)."""
        if self.directory is None:
            return []
        try:
            raw = (self.directory / HITS_FILE).read_bytes()
        except FileNotFoundError:
            return []
        found: list[Hit] = []
        for line in raw.splitlines():
            try:
                data = json.loads(line)
                found.append(Hit(str(data["name"]), str(data["action"]), str(data["process"]),
                                 int(data["pid"]), float(data["at"])))
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def _hit_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for hit in self.hits():
            counts[hit.name] = counts.get(hit.name, 0) + 1
        return counts

    @staticmethod
    def _entries(armed: Mapping[str, Arming], counts: Mapping[str, int],
                 names: list[str]) -> list[dict[str, Any]]:
        rows = []
        for name in names:
            spec = POINTS[name]
            arming = armed.get(name)
            rows.append({"name": name, "layer": spec.layer, "process": spec.process,
                         "description": spec.description, "actions": list(spec.actions),
                         "armed": arming.to_json() if arming is not None else None,
                         "hits": counts.get(name, 0)})
        return rows

    def _read_armed(self) -> dict[str, Arming]:
        if self.directory is None:
            return {}
        try:
            data = json.loads((self.directory / ARMED_FILE).read_bytes())
            return {name: Arming.from_stored(row) for name, row in data["points"].items()
                    if name in POINTS}
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("crash points: unreadable %s (%s); treated as nothing armed", ARMED_FILE, exc)
            return {}

    @staticmethod
    def _write_armed(directory: Path, armed: Mapping[str, Arming]) -> None:
        document = {"points": {name: {**arming.to_json(), "id": arming.id} for name, arming in armed.items()}}
        temporary = directory / f".{ARMED_FILE}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps(document, indent=1) + "\n")
        os.replace(temporary, directory / ARMED_FILE)  # a new inode: every poller notices

    @contextlib.contextmanager
    def _locked(self) -> Iterator[Path]:
        if self.directory is None:
            raise CrashPointsDisabled(f"crash points are off: {ENV_DIR} is not set")
        with open(self.directory / LOCK_FILE, "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield self.directory
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
