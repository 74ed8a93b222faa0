"""Locust as a subprocess: its gevent monkey-patching stays out of the harness.

Locust runs in a process group of its own (its `--processes` workers included) and
never outlives the harness: its master carries a parent-death SIGTERM, and when a
`RunGuard` is given the group is on the run's lease, so the lifeline janitor stops
the whole group if the harness dies by SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.ports import free_port
from harness.services import _child_setup

LOCUSTFILES = Path(__file__).resolve().parent.parent / "locustfiles"


def locustfile_for(scenario: str) -> Path:
    path = LOCUSTFILES / f"{scenario}.py"
    if not path.is_file():
        raise HarnessError(f"no locustfile for scenario {scenario!r} at {path}")
    return path


class LocustProcess:
    """One headless Locust run (master plus `processes` workers when processes > 1)."""

    def __init__(
        self,
        *,
        locustfile: Path,
        host: str,
        users: int,
        spawn_rate: float,
        duration: float,
        processes: int,
        output_dir: Path,
        env: Mapping[str, str],
        stop_timeout: float = 3.0,
        guard: Any = None,  # a harness.lifeline.RunGuard
    ) -> None:
        self.guard = guard
        self.locustfile = locustfile
        self.host = host
        self.users = users
        self.spawn_rate = spawn_rate
        self.duration = duration
        self.processes = processes
        self.output_dir = Path(output_dir)
        self.env = dict(env)
        self.stop_timeout = stop_timeout
        self.log_path = self.output_dir / "locust.log"
        self._process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        args = [
            sys.executable, "-m", "locust",
            "-f", str(self.locustfile),
            "--headless",
            "--users", str(self.users),
            "--spawn-rate", f"{self.spawn_rate:g}",
            "--run-time", f"{max(1, round(self.duration))}s",
            "--stop-timeout", f"{self.stop_timeout:g}",
            "--host", self.host,
            "--csv", str(self.output_dir / "stats"),
            "--html", str(self.output_dir / "report.html"),
            "--only-summary",
            # Deliberate duplicates get 4xx answers; they are data for the checker,
            # not a reason for Locust to report failure.
            "--exit-code-on-error", "0",
        ]
        if self.processes > 1:
            port = free_port()
            args += [
                "--processes", str(self.processes),
                "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                "--master-host", "127.0.0.1", "--master-port", str(port),
            ]
        return args

    def start(self) -> None:
        self.output_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, start_new_session=True,
                preexec_fn=_child_setup(os.getpid(), signal.SIGTERM),
            )
        if self.guard is not None:
            self.guard.add_process(self._process.pid, "locust")

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def finished(self, *, timeout: float) -> bool:
        if self._process is None:
            return True
        try:
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.returncode

    def stop(self, *, grace: float = 10.0) -> None:
        """Stop the whole process group: master and forked workers."""
        if self._process is None:
            return
        if self._process.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self._process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self._process.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        # Forked workers outlive a master that exited on its own only by a bug; never leave them.
        try:
            os.killpg(self._process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.guard is not None:
            self.guard.remove_process(self._process.pid)
