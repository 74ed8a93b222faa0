"""The `harness` console script and `python -m harness`: the command line, started so
that a signal is honoured from the process's first instant.

Importing the command line takes a few tenths of a second, and several seconds on a
busy machine. A SIGTERM, SIGHUP or SIGINT in that time would end the process by the
signal's default action (killed by SIGTERM, or a KeyboardInterrupt traceback) instead
of the command line's exit code 128+N. Nothing has started then, so nothing needs
stopping: until `harness.cli.main.main` installs its own handlers for the command
(harness.stack.lifeline.interrupt_signals, which puts these back when it is done),
these end the process at once with 128+N and one line on stderr.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

EARLY_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _stop_before_anything_started(signum: int, frame: FrameType | None) -> None:
    os.write(2, f"harness: interrupted ({signal.Signals(signum).name}) before the command started\n".encode())
    os._exit(128 + signum)  # nothing to clean up yet: no finally, no atexit needed


def run(argv: Sequence[str] | None = None) -> int:
    """Install the early handlers, import the command line, run it; its exit code."""
    for signum in EARLY_SIGNALS:
        signal.signal(signum, _stop_before_anything_started)
    from harness.cli.main import main  # the slow part: every subcommand's imports

    return main(argv)


if __name__ == "__main__":
    sys.exit(run())
