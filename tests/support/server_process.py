"""Stopping a server process a test started in its own process group.

The real servers of the suite (PostgreSQL, RabbitMQ, NATS) each get one signal their
server reads as a clean shutdown, a grace time to act on it, then SIGKILL of the whole
group (a postmaster's backends, an Erlang node's port programs live in it). Their data
folder goes with them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path


def stop_server(process: subprocess.Popen[bytes] | None, shutdown: signal.Signals, grace: float, *,
                sweep_group: bool = False) -> None:
    """`shutdown`, up to `grace` seconds, then SIGKILL of its group if it is still running;
    with `sweep_group` the group is killed even after a clean exit (what a node leaves)."""
    if process is None:
        return
    exited = process.poll() is not None
    if not exited:
        process.send_signal(shutdown)
        try:
            process.wait(timeout=grace)
            exited = True
        except subprocess.TimeoutExpired:
            pass
    if not exited or sweep_group:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the group is gone already
        process.wait(timeout=grace)


def remove_folder(root: Path | None) -> None:
    """The server's data folder, whatever is left in it."""
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)
