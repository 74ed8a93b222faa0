"""A run directory (`runs/<run-id>/`): every path in it, and its readers and writers.

Like Jepsen's store, this module is the one place that knows how a run is laid out
on disk (docs/internals.md, "Run directory"); the runner, the swarm session, the
checker, the report, the smoke job and the matrix ask a `RunDir` for a path or a
record instead of spelling file names. `RunSettings` is settings.json as a value:
written by the runner and by `harness.webui.session`, read by the checker and the
report.

This module imports nothing of the harness but its error root and the history's
file naming, so the checker can use it without pulling in the runner.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from harness.errors import HarnessError
from harness.history import history_files

SETTINGS_FILE = "settings.json"
HISTORIES_DIR = "histories"
FAULTS_FILE = "faults.jsonl"
EXPORT_FILE = "export.ndjson"
BASELINE_FILE = "baseline.ndjson"
FINAL_READS_FILE = "final_reads.ndjson"
RESULT_FILE = "result.json"
JUNIT_FILE = "junit.xml"
REPORT_FILE = "report.html"
INTERRUPTED_FILE = "interrupted.json"
CLEANUP_FILE = "cleanup_errors.jsonl"
PLAN_FILE = "plan.yaml"
LOGS_DIR = "logs"
LOCUST_DIR = "locust"
STACK_DIR = "stack"

_JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


class RunDirError(HarnessError):
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


# settings.json keys this class reads into fields; any other key is kept in `extra`.
_KNOWN = frozenset({"run_id", "scenario", "mode", "whole_state", "unsafe_disable", "users", "seed",
                    "duration", "promised_paths", "min_acknowledged", "plan", "spec", "stack",
                    "started_at", "finished_at", "scope"})
DEFAULT_MIN_ACKNOWLEDGED = 1


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
        """Validate settings.json's object; a wrong type is a RunDirError naming the key."""
        unsafe = data.get("unsafe_disable") or []
        if isinstance(unsafe, str):  # older runs wrote a comma list
            unsafe = [part.strip() for part in unsafe.split(",") if part.strip()]
        if not isinstance(unsafe, list) or not all(isinstance(name, str) for name in unsafe):
            raise RunDirError(f"settings.json: unsafe_disable must be a list of names, not {unsafe!r}")
        promised = data.get("promised_paths") or []
        if not isinstance(promised, list) or not all(isinstance(name, str) for name in promised):
            raise RunDirError(f"settings.json: promised_paths must be a list of path names, not {promised!r}")
        minimum = data.get("min_acknowledged", DEFAULT_MIN_ACKNOWLEDGED)
        if minimum is None:
            minimum = DEFAULT_MIN_ACKNOWLEDGED
        if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 0:
            raise RunDirError(f"settings.json: min_acknowledged must be an int >= 0, not {minimum!r}")
        spec = data.get("spec")
        stack = data.get("stack") or {}
        if spec is not None and not isinstance(spec, dict):
            raise RunDirError(f"settings.json: spec must be an object, not {spec!r}")
        if not isinstance(stack, dict):
            raise RunDirError(f"settings.json: stack must be an object, not {stack!r}")
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
        raise RunDirError(f"settings.json: {name} must be an int, not {value!r}")
    return value


def _optional_float(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RunDirError(f"settings.json: {name} must be a number, not {value!r}")
    return float(value)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _scope(value: Any) -> RunScope | None:
    if not value:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("baseline"), str) or not value["baseline"]:
        raise RunDirError(
            f"settings.json has a scope without a baseline ({value!r}): runs on a reused stack are "
            "scoped by the export saved before the load, not by clocks; re-run it")
    counters = value.get("counters_before")
    if counters is not None and not isinstance(counters, dict):
        raise RunDirError(f"settings.json: scope.counters_before must be an object, not {counters!r}")
    return RunScope(value["baseline"], counters)


@dataclass(frozen=True)
class CleanupFailure:
    """A cleanup step of a run that failed (a heal, a restart, a delete): a harness failure."""

    step: str
    error: str
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"step": self.step, "error": self.error, "at": self.at}


@dataclass(frozen=True)
class RunDir:
    """The paths of one run directory and the readers and writers of its files."""

    path: Path

    @classmethod
    def create(cls, runs_root: Path, run_id: str) -> RunDir:
        """A new, empty run directory with its `histories/`; an existing one is an error."""
        run_dir = cls(Path(runs_root) / run_id)
        try:
            run_dir.path.mkdir(parents=True, exist_ok=False)
        except FileExistsError as error:
            raise RunDirError(f"run directory {run_dir.path} already exists") from error
        run_dir.histories.mkdir()
        return run_dir

    @property
    def name(self) -> str:
        return self.path.name

    # -- paths ---------------------------------------------------------------------------

    @property
    def settings(self) -> Path:
        return self.path / SETTINGS_FILE

    @property
    def histories(self) -> Path:
        return self.path / HISTORIES_DIR

    @property
    def faults(self) -> Path:
        return self.path / FAULTS_FILE

    @property
    def export(self) -> Path:
        return self.path / EXPORT_FILE

    @property
    def baseline(self) -> Path:
        return self.path / BASELINE_FILE

    @property
    def final_reads(self) -> Path:
        return self.path / FINAL_READS_FILE

    @property
    def result(self) -> Path:
        return self.path / RESULT_FILE

    @property
    def junit(self) -> Path:
        return self.path / JUNIT_FILE

    @property
    def report(self) -> Path:
        return self.path / REPORT_FILE

    @property
    def interrupted(self) -> Path:
        return self.path / INTERRUPTED_FILE

    @property
    def cleanup_errors(self) -> Path:
        return self.path / CLEANUP_FILE

    @property
    def plan(self) -> Path:
        return self.path / PLAN_FILE

    @property
    def logs(self) -> Path:
        return self.path / LOGS_DIR

    @property
    def locust(self) -> Path:
        return self.path / LOCUST_DIR

    @property
    def stack_root(self) -> Path:
        """Where a stack the run started itself keeps its state and logs."""
        return self.path / STACK_DIR

    def scope_file(self, scope: RunScope) -> Path:
        return self.path / scope.baseline

    def history_files(self) -> list[Path]:
        """The run's history files, in name order (one per load process)."""
        return history_files(self.histories)

    # -- settings.json -------------------------------------------------------------------

    def write_settings(self, settings: RunSettings) -> None:
        _write_atomic(self.settings, orjson.dumps(settings.to_json(), option=_JSON_OPTIONS))

    def has_settings(self) -> bool:
        return self.settings.is_file()

    def read_settings(self) -> RunSettings | None:
        """settings.json as a value; None when there is none, a RunDirError when it is bad."""
        try:
            raw = self.settings.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise RunDirError(f"{self.settings} is unreadable: {error}") from error
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            raise RunDirError(f"{self.settings} is not JSON: {error}") from error
        if not isinstance(data, dict):
            raise RunDirError(f"{self.settings} is not a JSON object")
        return RunSettings.from_json(data, default_run_id=self.name)

    # -- the fault log -------------------------------------------------------------------

    def read_faults(self, *, strict: bool = True) -> list[dict[str, Any]]:
        """faults.jsonl's lines ([] when there is none). `strict`: a bad line is a
        RunDirError (the checker); otherwise it is skipped (the report is best effort)."""
        try:
            lines = self.faults.read_bytes().splitlines()
        except FileNotFoundError:
            return []
        except OSError as error:
            if strict:
                raise RunDirError(f"{self.faults} is unreadable: {error}") from error
            return []
        faults = []
        for line in lines:
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as error:
                if strict:
                    raise RunDirError(f"{self.faults} is unreadable: {error}") from error
                continue
            if isinstance(record, dict):
                faults.append(record)
            elif strict:
                raise RunDirError(f"{self.faults}: a line is not an object")
        return faults

    # -- NDJSON files (export, baseline, final reads) --------------------------------------

    def read_ndjson(self, path: Path, what: str) -> Iterator[dict[str, Any]]:
        """The objects of an NDJSON file of this run, streamed; a missing file or a bad
        line is a RunDirError."""
        return _read_ndjson(path, what)

    # -- verdict files -------------------------------------------------------------------

    def write_result(self, document: Mapping[str, Any]) -> None:
        """result.json (the one JSON serialisation of the check result, made by its caller)."""
        _write_atomic(self.result, orjson.dumps(document, option=_JSON_OPTIONS))

    def write_text(self, path: Path, text: str) -> None:
        """A report file of this run, written whole (no reader sees half of it)."""
        _write_atomic(path, text.encode("utf-8", "replace"))

    def interrupted_marker(self) -> dict[str, Any] | None:
        """interrupted.json (written by harness.processes.registry when a run was stopped)."""
        try:
            data = orjson.loads(self.interrupted.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None

    # -- cleanup failures ----------------------------------------------------------------

    def record_cleanup_errors(self, errors: Sequence[CleanupFailure]) -> None:
        """Append failed cleanup steps to cleanup_errors.jsonl (kept with the run's evidence)."""
        if not errors:
            return
        with open(self.cleanup_errors, "ab") as handle:
            for error in errors:
                handle.write(orjson.dumps(error.to_json(), option=orjson.OPT_APPEND_NEWLINE))

    def read_cleanup_errors(self) -> list[CleanupFailure]:
        try:
            lines = self.cleanup_errors.read_bytes().splitlines()
        except FileNotFoundError:
            return []
        errors = []
        for line in lines:
            try:
                data = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a torn last line of a killed writer
            if isinstance(data, dict):
                errors.append(CleanupFailure(str(data.get("step")), str(data.get("error")),
                                           float(data.get("at") or 0.0)))
        return errors


def _read_ndjson(path: Path, what: str) -> Iterator[dict[str, Any]]:
    try:
        handle = open(path, "rb")
    except OSError as error:
        raise RunDirError(f"{what} {path} is missing or unreadable: {error}") from error
    loads = orjson.loads
    number = 0
    with handle:
        for line in handle:
            number += 1
            try:
                record = loads(line)
            except orjson.JSONDecodeError as error:
                if not line.strip():
                    continue
                raise RunDirError(f"{path}:{number}: {what} line is not JSON: {error}") from error
            if type(record) is not dict:
                raise RunDirError(f"{path}:{number}: {what} line is not an object")
            yield record


def _write_atomic(path: Path, data: bytes) -> None:
    """Write beside the target then rename, so a reader never sees half a file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)
