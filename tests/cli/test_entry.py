"""harness.cli.entry: a signal during the command line's own imports ends `harness`
with 128+N and one line, not by the signal's default action (on a busy machine the
imports take seconds, and a supervisor stopping a run that just started sends its
SIGTERM then)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

# Sends the signal to itself while `harness.cli.main` (the slow import) is being imported.
DURING_IMPORT = """
import builtins, os, signal, sys
from harness.cli import entry
real_import = builtins.__import__
def import_and_signal(name, *args, **kwargs):
    if name == "harness.cli.main":
        os.kill(os.getpid(), signal.{name})
    return real_import(name, *args, **kwargs)
builtins.__import__ = import_and_signal
sys.exit(entry.run(["--help"]))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_while_the_command_line_imports_is_128_plus_n(signum: signal.Signals) -> None:
    done = subprocess.run([sys.executable, "-c", DURING_IMPORT.format(name=signum.name)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 128 + signum, (done.returncode, done.stderr)
    assert done.stderr.strip() == f"harness: interrupted ({signum.name}) before the command started", done.stderr
    assert "usage:" not in done.stdout  # the command never ran


def test_without_a_signal_the_command_runs_and_the_package_imports_nothing() -> None:
    code = ("import sys; import harness.cli; assert 'harness.cli.main' not in sys.modules, 'eager import'; "
            "from harness.cli import entry; sys.exit(entry.run(['--help']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: harness"), done.stdout[:200]
