"""The harness command line, launched from the tests as a user launches it.

Every test that runs the CLI in a child process goes through here, so all of them run
the same command: `python -m harness ARGS` with this interpreter, built by
`harness.stack.services.python_module` (the launcher the stack uses for its own
Python services).

- `run_harness(*args, timeout=..., cwd=None, env=None, input=None)` runs it to the
  end and returns the `CompletedProcess[str]`: text mode, stdout and stderr captured,
  stdin empty unless `input` is given (a command that wants to read a terminal fails
  instead of hanging), and a timeout every caller states (`TimeoutExpired` then fails
  the test instead of stalling the session).
- `start_harness(*args, stdout=..., stderr=..., cwd=None, env=None)` starts it and
  returns the `Popen[str]` for commands that run until signalled or that a test
  watches while they run (`up --foreground`, `toxiproxy serve`, `worker`, a `run`
  interrupted on purpose). Where the output goes is the caller's choice, never a
  default: a pipe nobody reads fills and blocks the process. Stopping it is the
  caller's job.
- `env` is the child's whole environment, as with `subprocess`; None inherits this
  process's. `clean_env(**extra)` is this process's environment without any
  HARNESS_* or TARGET_APP_* setting (a new user's shell), plus `extra`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from harness.stack.services import python_module

# What a developer or CI job may have exported for the harness or the app: a child that
# inherited them would test their settings instead of the ones the test gives.
LEAKY_PREFIXES = ("HARNESS_", "TARGET_APP_")

Output = int | IO[str] | IO[bytes] | None


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without HARNESS_* / TARGET_APP_* variables, plus `extra`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(LEAKY_PREFIXES)}
    env.update(extra)
    return env


def harness_argv(*args: str) -> list[str]:
    """`python -m harness ARGS` with the interpreter running the tests."""
    return python_module("harness", *args)


def run_harness(*args: str, timeout: float, cwd: Path | str | None = None, env: Mapping[str, str] | None = None,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `harness ARGS` to completion in `cwd` (None: the current directory)."""
    return subprocess.run(harness_argv(*args), cwd=cwd, env=None if env is None else dict(env),
                          capture_output=True, text=True, timeout=timeout, input=input,
                          stdin=subprocess.DEVNULL if input is None else None)


def start_harness(*args: str, stdout: Output, stderr: Output, cwd: Path | str | None = None,
                  env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """Start `harness ARGS` in `cwd` with stdin empty; the caller waits for it or stops it."""
    return subprocess.Popen(harness_argv(*args), cwd=cwd, env=None if env is None else dict(env),
                            stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, text=True)
