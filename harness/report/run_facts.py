"""What the report reads of a run beside the check result: the load window and the
stack's Redis settings, as typed records, and the run files that hold them.

`LoadWindow` (load.json) says when the load ran: `started` (the load began),
`stopped` (the Locust process had exited) and `healed` (the faults still on at the
end of the load were taken away: always after `stopped`, so no request is answered
after the heal). `RedisCapture` (redis.json) is the stack's Redis settings read by
the runner before the load and after the state was collected: `maxmemory`,
`maxmemory-policy`, persistence (`appendonly`, `save`) and INFO's `evicted_keys`.
`redis_warnings(capture)` says, one sentence each, why those settings make the
idempotency records disposable (docs/report.md, "Warnings").

The records are declared here, below the run package, because the report never
imports `harness.run`; `harness.run.rundir.RunDir` writes and reads them and is a
`ReportFiles`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from harness.check.run_files import RunFiles

# The one policy under which Redis refuses a write instead of dropping a key.
SAFE_POLICY = "noeviction"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class LoadWindow:
    """When the load ran, in unix seconds; None for a moment the run never reached."""

    started: float | None = None
    stopped: float | None = None
    healed: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"started": self.started, "stopped": self.stopped, "healed": self.healed}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LoadWindow:
        return cls(started=_number(data.get("started")), stopped=_number(data.get("stopped")),
                   healed=_number(data.get("healed")))


@dataclass(frozen=True)
class RedisSettings:
    """One reading of a Redis server's settings; `error` says why a reading failed."""

    at: float
    maxmemory: int | None = None  # bytes; 0 is no limit
    maxmemory_policy: str | None = None
    appendonly: bool | None = None
    save: str | None = None  # the `save` rules; "" is no RDB snapshots
    evicted_keys: int | None = None  # INFO stats: keys evicted since the server started
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "maxmemory": self.maxmemory, "maxmemory_policy": self.maxmemory_policy,
                "appendonly": self.appendonly, "save": self.save, "evicted_keys": self.evicted_keys,
                "error": self.error}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RedisSettings:
        appendonly = data.get("appendonly")
        return cls(at=_number(data.get("at")) or 0.0, maxmemory=_integer(data.get("maxmemory")),
                   maxmemory_policy=_text(data.get("maxmemory_policy")),
                   appendonly=appendonly if isinstance(appendonly, bool) else None,
                   save=_text(data.get("save")), evicted_keys=_integer(data.get("evicted_keys")),
                   error=_text(data.get("error")))


@dataclass(frozen=True)
class RedisCapture:
    """The stack's Redis read before the load and after the run (None: not read)."""

    before: RedisSettings | None = None
    after: RedisSettings | None = None

    def to_json(self) -> dict[str, Any]:
        return {"before": self.before.to_json() if self.before is not None else None,
                "after": self.after.to_json() if self.after is not None else None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RedisCapture:
        def reading(key: str) -> RedisSettings | None:
            value = data.get(key)
            return RedisSettings.from_json(value) if isinstance(value, Mapping) else None
        return cls(before=reading("before"), after=reading("after"))

    @property
    def latest(self) -> RedisSettings | None:
        """The last reading that worked (the settings may have been changed during the run)."""
        for reading in (self.after, self.before):
            if reading is not None and reading.error is None:
                return reading
        return None

    @property
    def evicted_during_run(self) -> int | None:
        """Keys evicted between the two readings; None when either count is missing."""
        if self.before is None or self.after is None:
            return None
        if self.before.evicted_keys is None or self.after.evicted_keys is None:
            return None
        # A server restarted during the run counts from zero again: what it evicted since.
        if self.after.evicted_keys < self.before.evicted_keys:
            return self.after.evicted_keys
        return self.after.evicted_keys - self.before.evicted_keys


def redis_warnings(capture: RedisCapture) -> list[str]:
    """Why the stack's Redis settings make the idempotency records disposable; [] if they do not.

    Any eviction policy but `noeviction` lets Redis drop a completed record (or an
    in-flight claim) when memory runs short, and the next retry of that key runs the
    operation again; keys evicted during the run say that it happened."""
    warnings: list[str] = []
    policies = {reading.maxmemory_policy for reading in (capture.before, capture.after)
                if reading is not None and reading.maxmemory_policy is not None}
    for policy in sorted(policies - {SAFE_POLICY}):
        latest = capture.latest
        limit = f" with maxmemory {latest.maxmemory} bytes" if latest is not None and latest.maxmemory else ""
        warnings.append(f"maxmemory-policy is {policy}{limit}: Redis may evict idempotency records and "
                        f"in-flight claims when memory runs short, and a retry of an evicted key runs "
                        f"again; only {SAFE_POLICY} keeps them")
    evicted = capture.evicted_during_run
    if evicted:
        warnings.append(f"Redis evicted {evicted} key(s) during the run (INFO evicted_keys): idempotency "
                        "records may have been among them, so a violation may come from the stack's "
                        "configuration rather than the app")
    return warnings


class ReportFiles(RunFiles, Protocol):
    """A run directory as the report reads it: the checker's files and the two above."""

    def read_load_window(self) -> LoadWindow | None: ...

    def read_redis_capture(self) -> RedisCapture | None: ...
