"""Running the `harness` CLI as a user does, for the end-to-end tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.cli import clean_env, run_harness


@dataclass
class Completed:
    code: int
    stdout: str
    stderr: str


def harness(*args: str, cwd: Path, timeout: float = 400, env: dict[str, str] | None = None) -> Completed:
    """Run `harness ARGS` in `cwd` with no TARGET_APP_* or HARNESS_* leaking in from the caller."""
    completed = run_harness(*args, cwd=cwd, env=clean_env(**(env or {})), timeout=timeout)
    return Completed(completed.returncode, completed.stdout, completed.stderr)


@dataclass
class SmokeRun:
    result: Completed
    runs: Path
