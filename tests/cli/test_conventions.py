"""The command line's conventions: `--version`, `python -m harness`, exit codes in --help."""

from __future__ import annotations

import subprocess
from importlib.metadata import version

from tests.support.cli import run_harness


def _harness(*args: str) -> subprocess.CompletedProcess[str]:
    return run_harness(*args, timeout=60)


def test_version_names_the_installed_distribution() -> None:
    completed = _harness("--version")
    assert completed.returncode == 0
    assert completed.stdout.strip() == f"harness {version('idempotency-chaos-harness')}"


def test_help_through_python_dash_m_lists_every_exit_code() -> None:
    completed = _harness("--help")
    assert completed.returncode == 0
    text = " ".join(completed.stdout.split())
    for code in ("0 pass", "1 an invariant was violated", "2 the harness failed", "3 inconclusive",
                 "143 SIGTERM"):
        assert code in text, code
