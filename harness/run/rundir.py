"""A run directory (`runs/<run-id>/`): every path in it, and its readers and writers.

Like Jepsen's store, this module is the one place that knows how a run is laid out
on disk (docs/internals.md, "Run directory"); the runner, the swarm session, the
smoke job and the matrix ask a `RunDir` for a path or a record instead of spelling
file names, and hand it to the checker and the report, which take it as the
`RunFiles` they declare (harness.check.run_files, with `RunSettings`: settings.json
as a value; re-exported here).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from harness import names
from harness.check.run_files import Interruption, RunFileError, RunScope, RunSettings
from harness.history import history_files
from harness.report.run_facts import LoadWindow, RedisCapture

SETTINGS_FILE = names.SETTINGS_FILE  # and the registry, when it marks a run interrupted
HISTORIES_DIR = names.HISTORIES_DIR  # the load writes there too (harness.load.transport)
FAULTS_FILE = names.FAULT_LOG  # and the nemesis (harness.nemesis.runner)
EXPORT_FILE = names.EXPORT_FILE
BASELINE_FILE = "baseline.ndjson"
FINAL_READS_FILE = "final_reads.ndjson"
RESULT_FILE = names.RESULT_FILE
JUNIT_FILE = "junit.xml"
REPORT_FILE = "report.html"
INTERRUPTED_FILE = names.INTERRUPTED_FILE
CLEANUP_FILE = "cleanup_errors.jsonl"
PLAN_FILE = "plan.yaml"
LOAD_WINDOW_FILE = "load.json"
REDIS_FILE = "redis.json"
LOGS_DIR = "logs"
LOCUST_DIR = "locust"
STACK_DIR = "stack"

__all__ = ["BASELINE_FILE", "FINAL_READS_FILE", "HISTORIES_DIR", "CleanupFailure", "RunDir", "RunDirError",
           "RunScope", "RunSettings"]

_JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


# One error for a missing or malformed file of a run directory, whichever layer read it
# (the checker's RunFileError: the checker reads settings.json through RunSettings too).
RunDirError = RunFileError


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
    def load_window(self) -> Path:
        return self.path / LOAD_WINDOW_FILE

    @property
    def redis_capture(self) -> Path:
        return self.path / REDIS_FILE

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

    # -- load.json and redis.json (harness.report.run_facts) --------------------------------

    def write_load_window(self, window: LoadWindow) -> None:
        _write_atomic(self.load_window, orjson.dumps(window.to_json(), option=_JSON_OPTIONS))

    def read_load_window(self) -> LoadWindow | None:
        """load.json as a value; None when there is none or it is not an object (the
        report is best effort)."""
        data = _read_object(self.load_window)
        return LoadWindow.from_json(data) if data is not None else None

    def write_redis_capture(self, capture: RedisCapture) -> None:
        _write_atomic(self.redis_capture, orjson.dumps(capture.to_json(), option=_JSON_OPTIONS))

    def read_redis_capture(self) -> RedisCapture | None:
        """redis.json as a value; None when there is none or it is not an object."""
        data = _read_object(self.redis_capture)
        return RedisCapture.from_json(data) if data is not None else None

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

    def interrupted_marker(self) -> Interruption | None:
        """interrupted.json (written by harness.stack.registry when a run was stopped)."""
        try:
            data = orjson.loads(self.interrupted.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        return Interruption.from_json(data) if isinstance(data, dict) else None

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


def _read_object(path: Path) -> dict[str, Any] | None:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _write_atomic(path: Path, data: bytes) -> None:
    """Write beside the target then rename, so a reader never sees half a file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)
