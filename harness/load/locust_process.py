"""Locust as a subprocess: its gevent monkey-patching stays out of the harness.

One process (standalone) when the run has one load process; otherwise Locust's own
master/worker mode: a master (`--master --expect-workers N`) plus `workers` local
`locust --worker` processes, and `remote_workers` more that join over TCP from
elsewhere (`harness worker --master HOST:PORT`). Workers send their histories to the
master with Locust's messaging (`harness.load.transport`); the master writes them
into the run's history directory.

Locust runs in a process group of its own (its local workers included) and never
outlives the harness: every process carries a parent-death SIGTERM, and when a
`RunGuard` is given the group is on the run's lease, so the lifeline janitor stops
the whole group if the harness dies by SIGKILL. `pid`, `finished()` and
`returncode` come from `harness.process_handle.ProcessHandle`, which the compose
Locust (`harness.stack.compose.ComposeLocust`) shares.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from harness import bundled
from harness.errors import HarnessError
from harness.load.forkserver import fork_locust
from harness.load.settings import RUN_TIME_FLAG
from harness.ports import free_port
from harness.process_handle import ProcessGuard, ProcessHandle
from harness.stack.services import _child_setup

DEFAULT_MASTER_PORT = 5557
DEFAULT_STOP_TIMEOUT = 3.0  # seconds the users may finish their task at the load's end


def parse_master_address(text: str, *, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """`HOST[:PORT]` (or `:PORT`) as (host, port); the port defaults to Locust's 5557."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = text.strip(), str(DEFAULT_MASTER_PORT)
    host = host.strip("[]") or default_host
    try:
        number = int(port)
    except ValueError:
        raise HarnessError(f"bad master address {text!r}: the port must be a number") from None
    if not 0 < number < 65536:
        raise HarnessError(f"bad master address {text!r}: port {number} is out of range")
    return host, number


def locustfile_for(scenario: str) -> Path:
    return bundled.locustfile(scenario)


class LocustProcess(ProcessHandle):
    """One headless Locust run: standalone, or a master with `processes` local worker
    processes and `remote_workers` workers that join from elsewhere (pid, finished
    and returncode are the master's, from `ProcessHandle`)."""

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
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
        guard: ProcessGuard | None = None,
        remote_workers: int = 0,
        master_bind: tuple[str, int] | None = None,
        workers_wait: float = 120.0,
        forkserver: Path | None = None,
    ) -> None:
        super().__init__()
        # A standalone run is forked by the Locust fork server at this socket
        # (harness.load.forkserver) instead of started as `python -m locust`.
        self.forkserver = forkserver
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
        self.remote_workers = remote_workers
        self.workers_wait = workers_wait
        self.distributed = processes > 1 or remote_workers > 0 or master_bind is not None
        # Bound to loopback on a free port unless workers come from elsewhere.
        if master_bind is None and remote_workers > 0:
            master_bind = ("0.0.0.0", DEFAULT_MASTER_PORT)  # reachable from other machines
        elif master_bind is None and self.distributed:
            master_bind = ("127.0.0.1", free_port())
        self.master_bind = master_bind
        self._workers: list[subprocess.Popen[bytes]] = []

    def command(self) -> list[str]:
        return [sys.executable, "-m", "locust", *self.locust_args()]

    def locust_args(self) -> list[str]:
        """Locust's command line after `python -m locust`."""
        args = [
            "-f", str(self.locustfile),
            "--headless",
            "--users", str(self.users),
            "--spawn-rate", f"{self.spawn_rate:g}",
            # The load's length from its first user, not from Locust's start (whole
            # seconds, as --run-time counted them).
            RUN_TIME_FLAG, f"{max(1, round(self.duration))}",
            "--stop-timeout", f"{self.stop_timeout:g}",
            "--host", self.host,
            "--csv", str(self.output_dir / "stats"),
            "--html", str(self.output_dir / "report.html"),
            "--only-summary",
            # Deliberate duplicates get 4xx answers; they are data for the checker,
            # not a reason for Locust to report failure.
            "--exit-code-on-error", "0",
        ]
        if self.master_bind is not None:
            host, port = self.master_bind
            args += [
                "--master", "--master-bind-host", host, "--master-bind-port", str(port),
                "--expect-workers", str(self.processes + self.remote_workers),
                # Locust exits 1 when the workers do not all come: a bounded wait.
                "--expect-workers-max-wait", f"{self.workers_wait:g}",
            ]
        return args

    def worker_command(self) -> list[str]:
        """A local worker: the same locustfile; its settings come from the master."""
        assert self.master_bind is not None
        host, port = self.master_bind
        connect = "127.0.0.1" if host in ("0.0.0.0", "*", "", "::") else host
        return [sys.executable, "-m", "locust", "-f", str(self.locustfile), "--worker",
                "--master-host", connect, "--master-port", str(port)]

    def start(self) -> None:
        self.output_dir.mkdir(parents=True, exist_ok=True)
        if self.forkserver is not None and self.master_bind is None:
            self._process = fork_locust(self.forkserver, self.locust_args(), env=self.env, cwd=Path.cwd(),
                                        log_path=self.log_path)
        else:
            with open(self.log_path, "ab") as log:
                self._process = subprocess.Popen(
                    self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=self.env, start_new_session=True,
                    preexec_fn=_child_setup(os.getpid(), signal.SIGTERM),
                )
        if self.guard is not None:
            self.guard.add_process(self._process.pid, "locust")
        if self.master_bind is not None:
            with open(self.log_path, "ab") as log:
                for _ in range(self.processes):
                    # A session of its own each (a process cannot join the master's group
                    # across sessions), on the run's lease like the master.
                    worker = subprocess.Popen(
                        self.worker_command(), stdout=log, stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL, env=self.env, start_new_session=True,
                        preexec_fn=_child_setup(os.getpid(), signal.SIGTERM),
                    )
                    self._workers.append(worker)
                    if self.guard is not None:
                        self.guard.add_process(worker.pid, "locust-worker")

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
        # Workers leave when the master tells them to quit; give them a moment to send
        # their last statistics, then never leave one behind.
        deadline = time.monotonic() + grace
        for worker in self._workers:
            try:
                worker.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass  # killed just below
        for pid in [self._process.pid, *(worker.pid for worker in self._workers)]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # that group has exited: nothing to kill
        for worker in self._workers:
            worker.poll()  # reap
            if self.guard is not None:
                self.guard.remove_process(worker.pid)
        if self.guard is not None:
            self.guard.remove_process(self._process.pid)
