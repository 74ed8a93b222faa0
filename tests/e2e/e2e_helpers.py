"""Running the `harness` CLI as a user does, for the end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Completed:
    code: int
    stdout: str
    stderr: str


def harness(*args: str, cwd: Path, timeout: float = 400, env: dict[str, str] | None = None) -> Completed:
    """Run `harness ARGS` in `cwd` with no TARGET_APP_* or HARNESS_* leaking in from the caller."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TARGET_APP_", "HARNESS_"))}
    clean.update(env or {})
    completed = subprocess.run(
        [sys.executable, "-m", "harness.cli", *args], cwd=cwd, env=clean,
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )
    return Completed(completed.returncode, completed.stdout, completed.stderr)


@dataclass
class SmokeRun:
    result: Completed
    runs: Path
