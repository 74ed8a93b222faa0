"""What the checker and the report read of a run directory, and settings.json as a value.

`RunSettings` is settings.json (docs/internals.md, "Run directory"): written by the
runner and by the swarm session, read by the checker and the report. `RunFiles` is
the part of a run directory those two use; `harness.run.rundir.RunDir`, the one
owner of a run directory's layout, is one. Declared here, below the run package,
because the checker and the report never import `harness.run` (docs/architecture.md:
arrows point one way).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.errors import HarnessError

# The checker's default when settings.json names no minimum (docs/checker.md).
DEFAULT_MIN_ACKNOWLEDGED = 1


class RunFileError(HarnessError):
    """A file of a run directory is missing or malformed where it is required."""


@dataclass(frozen=True)
class RunScope:
    """On a reused stack: the export saved before the load (a file name in the run
    directory) and, optionally, the app's counters then (docs/checker.md)."""

    baseline: str
    counters_before: Mapping[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"baseline": self.baseline}
        if self.counters_before is not None:
            data["counters_before"] = dict(self.counters_before)
        return data


@dataclass(frozen=True)
class Interruption:
    """interrupted.json: a run stopped before its end (written by
    `harness.stack.registry.mark_interrupted`); a result of such a run carries it."""

    signal: str | None = None  # SIGTERM, SIGINT, ...; None when killed (the lifeline marked it)
    phase: str | None = None  # how far the run got: stack start, load or drain, check
    at: float | None = None
    by: str | None = None  # harness | lifeline
    checkable: bool = False  # the export was saved: the recorded part can be judged

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Interruption:
        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None
        at = data.get("at")
        return cls(signal=text("signal"), phase=text("phase"), by=text("by"),
                   at=float(at) if isinstance(at, (int, float)) else None, checkable=data.get("checkable") is True)

    def to_json(self) -> dict[str, Any]:
        return {"interrupted": True, "signal": self.signal, "phase": self.phase, "at": self.at, "by": self.by,
                "checkable": self.checkable}


# settings.json keys RunSettings reads into fields; any other key is kept in `extra`.
_KNOWN = frozenset({"run_id", "scenario", "mode", "whole_state", "unsafe_disable", "users", "seed",
                    "duration", "promised_paths", "min_acknowledged", "plan", "spec", "stack",
                    "started_at", "finished_at", "scope"})
@dataclass(frozen=True)
class RunSettings:
    """settings.json: what a run was asked to do, as the checker and the report read it.

    `mode` is `run` (`harness run` started the load) or `swarm` (someone else did:
    users and duration are theirs, so absent). `stack` is the stack's state without
    its secrets; `spec` the `RunSpec` as JSON. Keys this version does not know are
    kept in `extra` and written back unchanged.
    """

    run_id: str
    scenario: str
    mode: str = "run"
    unsafe_disable: tuple[str, ...] = ()
    promised_paths: tuple[str, ...] = ()
    min_acknowledged: int = DEFAULT_MIN_ACKNOWLEDGED
    users: int | None = None
    seed: int | None = None
    duration: float | None = None
    plan: str | None = None
    whole_state: bool = False
    spec: Mapping[str, Any] | None = None
    stack: Mapping[str, Any] = field(default_factory=dict)
    started_at: float | None = None
    finished_at: float | None = None
    scope: RunScope | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"run_id": self.run_id, "scenario": self.scenario, "mode": self.mode,
                                "unsafe_disable": list(self.unsafe_disable)}
        optional: dict[str, Any] = {"users": self.users, "seed": self.seed, "duration": self.duration,
                                    "plan": self.plan, "spec": dict(self.spec) if self.spec is not None else None,
                                    "started_at": self.started_at, "finished_at": self.finished_at}
        data.update({key: value for key, value in optional.items() if value is not None})
        if self.whole_state:
            data["whole_state"] = True
        data["promised_paths"] = list(self.promised_paths)
        data["min_acknowledged"] = self.min_acknowledged
        data["stack"] = dict(self.stack)
        if self.scope is not None:
            data["scope"] = self.scope.to_json()
        data.update({key: value for key, value in self.extra.items() if key not in _KNOWN})
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, default_run_id: str = "") -> RunSettings:
        """Validate settings.json's object; a wrong type is a RunFileError naming the key."""
        unsafe = data.get("unsafe_disable") or []
        if isinstance(unsafe, str):  # older runs wrote a comma list
            unsafe = [part.strip() for part in unsafe.split(",") if part.strip()]
        if not isinstance(unsafe, list) or not all(isinstance(name, str) for name in unsafe):
            raise RunFileError(f"settings.json: unsafe_disable must be a list of names, not {unsafe!r}")
        promised = data.get("promised_paths") or []
        if not isinstance(promised, list) or not all(isinstance(name, str) for name in promised):
            raise RunFileError(f"settings.json: promised_paths must be a list of path names, not {promised!r}")
        minimum = data.get("min_acknowledged", DEFAULT_MIN_ACKNOWLEDGED)
        if minimum is None:
            minimum = DEFAULT_MIN_ACKNOWLEDGED
        if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 0:
            raise RunFileError(f"settings.json: min_acknowledged must be an int >= 0, not {minimum!r}")
        spec = data.get("spec")
        stack = data.get("stack") or {}
        if spec is not None and not isinstance(spec, dict):
            raise RunFileError(f"settings.json: spec must be an object, not {spec!r}")
        if not isinstance(stack, dict):
            raise RunFileError(f"settings.json: stack must be an object, not {stack!r}")
        spec_of = spec or {}
        return cls(
            run_id=str(data.get("run_id") or default_run_id),
            scenario=str(data.get("scenario") or ""),
            mode=str(data.get("mode") or "run"),
            unsafe_disable=tuple(unsafe),
            promised_paths=tuple(promised),
            min_acknowledged=minimum,
            # Older settings carry users and seed only in the spec.
            users=_optional_int(data.get("users", spec_of.get("users")), "users"),
            seed=_optional_int(data.get("seed", spec_of.get("seed")), "seed"),
            duration=_optional_float(data.get("duration", spec_of.get("duration")), "duration"),
            plan=_optional_str(data.get("plan", spec_of.get("plan"))),
            whole_state=data.get("whole_state") is True,
            spec=spec,
            stack=stack,
            started_at=_optional_float(data.get("started_at"), "started_at"),
            finished_at=_optional_float(data.get("finished_at"), "finished_at"),
            scope=_scope(data.get("scope")),
            extra={key: value for key, value in data.items() if key not in _KNOWN},
        )


def _optional_int(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RunFileError(f"settings.json: {name} must be an int, not {value!r}")
    return value


def _optional_float(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RunFileError(f"settings.json: {name} must be a number, not {value!r}")
    return float(value)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _scope(value: Any) -> RunScope | None:
    if not value:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("baseline"), str) or not value["baseline"]:
        raise RunFileError(
            f"settings.json has a scope without a baseline ({value!r}): runs on a reused stack are "
            "scoped by the export saved before the load, not by clocks; re-run it")
    counters = value.get("counters_before")
    if counters is not None and not isinstance(counters, dict):
        raise RunFileError(f"settings.json: scope.counters_before must be an object, not {counters!r}")
    return RunScope(value["baseline"], counters)




class RunFiles(Protocol):
    """The files of one run directory as the checker and the report read and write them."""

    @property
    def path(self) -> Path: ...
    @property
    def name(self) -> str: ...
    @property
    def export(self) -> Path: ...
    @property
    def histories(self) -> Path: ...
    @property
    def final_reads(self) -> Path: ...
    @property
    def result(self) -> Path: ...
    @property
    def junit(self) -> Path: ...
    @property
    def report(self) -> Path: ...

    def history_files(self) -> list[Path]: ...

    def scope_file(self, scope: RunScope) -> Path: ...

    def read_settings(self) -> RunSettings | None: ...

    def read_faults(self, *, strict: bool = True) -> list[dict[str, Any]]: ...

    def read_ndjson(self, path: Path, what: str) -> Iterator[dict[str, Any]]: ...

    def write_result(self, document: Mapping[str, Any]) -> None: ...

    def write_text(self, path: Path, text: str) -> None: ...
