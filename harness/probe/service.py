"""The service under the probe's control, and the proxies in front of its dependencies.

`ProbedService` runs the config's `service:` the way the stack runs its own services
(`harness.stack.services.Service`: a process group of its own, a parent-death SIGKILL,
SIGTERM then SIGKILL of the whole group on stop), with stdout and stderr in
`service.log` of the run directory. It is the probe's `ProcessFaults`: a plan's
`kill`, `pause`, `resume`, `restart` and `start` of `service` act on it, and every
start waits until the service is ready again (`service.ready`). Each incarnation's
process group is entered on the run's lease (`harness.stack.lifeline.RunGuard`), so
the run's janitor stops it if the probe dies, even by SIGKILL.

A service that never gets ready, or whose process ends while the probe did not stop
it (`check()`, called while the load runs and after it; a crash at a step the probe
armed, `expect_crash`, is its own doing), is a `ServiceFailed`: a
HarnessError (exit 2) whose message ends with the tail of its log.

`DependencyProxies` creates one Toxiproxy proxy per dependency (`dependencies:`) on
the probe's Toxiproxy, each on a free loopback port, in front of the dependency's real
address, which must accept connections first. On a Toxiproxy the probe does not own
(`--toxiproxy-url`) the proxies carry the run's prefix and are entered on the lease
before they are created, so the janitor deletes them if the probe dies.

Processes are started on one long-lived thread of their own: Linux sends the
parent-death signal when the *thread* that forked a child ends, and process faults
arrive from the nemesis's thread, which ends before the final reads.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import requests

from harness.errors import HarnessError
from harness.nemesis.toxiproxy_client import Nemesis, NemesisError
from harness.probe.plan_targets import SERVICE
from harness.probe.service_config import ReadyCheck, ServiceConfig
from harness.process_handle import ProcessGuard, child_pids, pid_alive
from harness.stack import services as svc
from harness.stack.registry import ProxyClaim

LOG_NAME = "service.log"
STOP_TIMEOUT = 5.0
READY_POLL = 0.1
CHILD_GONE = 5.0  # seconds a SIGKILLed child may take to be gone (a zombie counts as gone)
T = TypeVar("T")


class ServiceFailed(HarnessError):
    """The probed service did not start, never got ready, or ended on its own."""


class ProxyRecorder(ProcessGuard, Protocol):
    """What the proxies need of a run's guard (`RunGuard`) besides its processes."""

    def proxy_created(self, claim: ProxyClaim) -> None: ...

    def proxy_deleted(self, name: str) -> None: ...


class LogSince:
    """The lines a log file got since `mark()`: the service's log is appended to by
    every incarnation, and a start is ready by what this one wrote."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def mark(self) -> None:
        try:
            self._offset = self.path.stat().st_size
        except OSError:
            self._offset = 0

    def text(self) -> str:
        try:
            with open(self.path, "rb") as log:
                log.seek(self._offset)
                return log.read().decode(errors="replace")
        except OSError:
            return ""


def ready_check(ready: ReadyCheck, port: int, *, log: LogSince | None = None,
                consumers: Callable[[], int | None] | None = None) -> Callable[[], bool]:
    """True once the service on 127.0.0.1:port is ready: GET ready.path answers 2xx, a
    line its `log` got since the start matches ready.log, `consumers()` (the fewest
    consumers of its queues; None: not known yet) reaches ready.consumers, or (none of
    them) the port accepts connections."""
    if ready.log is not None:
        if log is None:
            raise ValueError("a ready check by log needs the log")
        pattern = re.compile(ready.log, re.MULTILINE)
        return lambda: pattern.search(log.text()) is not None
    if ready.consumers is not None:
        if consumers is None:
            raise ValueError("a ready check by consumers needs a way to count them")
        wanted, count = ready.consumers, consumers

        def counted() -> bool:
            found = count()
            return found is not None and found >= wanted

        return counted
    if ready.path is None:
        return lambda: svc.port_listening(port)
    url = f"http://{svc.HOST}:{port}{ready.path}"

    def answered() -> bool:
        try:
            return 200 <= requests.get(url, timeout=1.0).status_code < 300
        except requests.RequestException:
            return False

    return answered


class ProbedService:
    """The config's service on 127.0.0.1:`port`, started, faulted and stopped by the probe."""

    def __init__(self, config: ServiceConfig, *, port: int, dependencies: Mapping[str, str], log_path: Path,
                 base_env: Mapping[str, str], guard: ProcessGuard | None = None,
                 consumers: Callable[[], int | None] | None = None) -> None:
        self.config = config
        self.port = port
        self.guard = guard
        env = {**base_env, **config.environment(port, dependencies)}
        self.argv = config.argv(port, dependencies)
        self._log = LogSince(log_path)
        self._service = svc.Service(svc.ServiceSpec(
            name=SERVICE, argv=self.argv, env=env, log_path=log_path, port=port if config.listens else None,
            check=ready_check(config.ready, port, log=self._log, consumers=consumers), cwd=config.cwd))
        self._lock = threading.RLock()
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="probe-service")
        self.starts = 0  # incarnations started, for the report
        self._stopped = False  # for good: no start after stop()
        self._crash_expected = False  # a step crash is armed: its death is the probe's own (expect_crash)

    @property
    def address(self) -> str:
        return f"{svc.HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self._service.spec.log_path

    @property
    def pid(self) -> int | None:
        return self._service.pid

    @property
    def running(self) -> bool:
        return self._service.running()

    def expect_crash(self, expected: bool) -> None:
        """A crash at a step is armed (harness.probe.explore): until it is off again,
        the process ending is the probe's doing, which `check()` does not report (the
        explorer restarts it)."""
        with self._lock:
            self._crash_expected = expected

    def _on_spawner(self, action: Callable[[], T]) -> T:
        return self._spawner.submit(action).result()

    # --- the life of the service ------------------------------------------------------

    def start(self, service: str = SERVICE) -> None:
        """Start it and wait until it is ready (ServiceFailed with its log's tail)."""
        self._named(service)
        with self._lock:
            if self._stopped:
                raise ServiceFailed("service: stopped for good; the probe is ending")
            if self._service.running():
                return  # already up: a heal after a fault that found it running
            self._log.mark()
            try:
                self._on_spawner(self._service.start)
            except (svc.ServiceError, OSError) as error:
                raise ServiceFailed(f"service: could not start {self.argv[0]!r}: {error}") from None
            pid = self._service.pid
            if self.guard is not None and pid is not None:
                self.guard.add_process(pid, SERVICE)
            self.starts += 1
            try:
                self._service.wait_healthy(self.config.ready.timeout, interval=READY_POLL)
            except svc.ServiceError:
                self._failed(f"not ready after {self.config.ready.timeout:g}s" if self._service.running()
                             else f"exited with code {self._returncode()} before it was ready")

    def check(self) -> None:
        """ServiceFailed when the process ended although the probe did not stop it."""
        with self._lock:
            if self._crash_expected:
                return
            if self._service.status in ("running", "paused") and not self._service.running():
                self._failed(f"exited on its own with code {self._returncode()}")

    def stop(self) -> None:
        """SIGTERM the group, SIGKILL after a grace time; off the lease. Safe to repeat."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            try:
                self._on_spawner(lambda: self._service.stop(STOP_TIMEOUT))
            finally:
                self._forget()
                self._spawner.shutdown(wait=True)

    # --- the process faults of a plan (harness.nemesis.faults.ProcessFaults) ----------

    def kill(self, service: str) -> None:
        self._named(service)
        with self._lock:
            self._service.kill()
            self._forget()

    def pause(self, service: str) -> None:
        self._named(service)
        with self._lock:
            self._require_running("pause")
            self._service.pause()

    def resume(self, service: str) -> None:
        self._named(service)
        with self._lock:
            self._require_running("resume")
            self._service.resume()

    def restart(self, service: str) -> None:
        self.kill(service)
        self.start(service)

    def kill_child(self, service: str, pick: str) -> int:
        """SIGKILL one child of the service's process (a worker's pool process), the
        one `pick` chooses among them in pid order; its pid, once it is gone.
        NemesisError when it has none or the child does not die within CHILD_GONE."""
        self._named(service)
        with self._lock:
            self._require_running("kill a child of it")
            pid = self._service.pid
            children = child_pids(pid) if pid is not None else []
            if not children:
                raise NemesisError(f"kill_child: the service (pid {pid}) has no child process to kill "
                                   "(a worker with a pool of its own: e.g. Celery's --pool prefork)")
            child = children[random.Random(pick).randrange(len(children))]
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass  # gone already: what was asked
            deadline = time.monotonic() + CHILD_GONE
            while pid_alive(child):
                if time.monotonic() > deadline:
                    raise NemesisError(f"kill_child: child {child} of the service still runs {CHILD_GONE:g}s "
                                       "after its SIGKILL")
                time.sleep(0.02)
            return child

    # --- helpers ----------------------------------------------------------------------

    def _named(self, service: str) -> None:
        if service != SERVICE:
            raise ServiceFailed(f"the probe runs one process, {SERVICE!r}, not {service!r}")

    def _require_running(self, action: str) -> None:
        if not self._service.running():
            self._failed(f"cannot {action}: not running (exited with code {self._returncode()})")

    def _returncode(self) -> int | str:
        process = self._service.process
        code = process.returncode if process is not None else None
        return "?" if code is None else code

    def _forget(self) -> None:
        pid = self._service.pid
        if self.guard is not None and pid is not None:
            self.guard.remove_process(pid)

    def _failed(self, what: str) -> None:
        """Stop what is left of it and raise with the log's tail."""
        tail = svc.tail(self.log_path).rstrip()
        try:
            self._on_spawner(lambda: self._service.stop(STOP_TIMEOUT))
        except svc.ServiceError:
            pass  # the error below says what matters; the janitor has the group on record
        self._forget()
        shown = " ".join(self.argv)
        raise ServiceFailed(f"service `{shown}` {what}; end of {self.log_path}:\n{tail or '(empty)'}")


# --- the dependency proxies ---------------------------------------------------------------

@dataclass(frozen=True)
class DependencyProxy:
    name: str  # the plan's name (the config's key)
    proxy: str  # its name on the Toxiproxy
    listen: str  # host:port the service connects to
    upstream: str  # the real dependency


def check_reachable(name: str, address: str, *, timeout: float = 3.0) -> None:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return
    except OSError as error:
        raise ServiceFailed(f"dependencies.{name}: {address} does not accept connections: "
                            f"{error.strerror or error}") from None


class DependencyProxies:
    """One proxy per dependency on the probe's Toxiproxy, removed by `remove()`."""

    def __init__(self, nemesis: Nemesis, *, prefix: str, recorder: ProxyRecorder | None) -> None:
        self.nemesis = nemesis
        self.prefix = prefix  # "" on the probe's own Toxiproxy
        self.recorder = recorder
        self.proxies: list[DependencyProxy] = []

    def create(self, dependencies: Mapping[str, str], ports: list[int]) -> None:
        for (name, upstream), port in zip(dependencies.items(), ports, strict=True):
            check_reachable(name, upstream)
            proxy = DependencyProxy(name=name, proxy=f"{self.prefix}{name}", listen=f"{svc.HOST}:{port}",
                                    upstream=upstream)
            if self.recorder is not None:
                self.recorder.proxy_created(ProxyClaim(proxy.proxy, proxy.listen, proxy.upstream))
            self.nemesis.ensure_proxy(proxy.proxy, proxy.listen, proxy.upstream)
            self.proxies.append(proxy)

    @property
    def addresses(self) -> dict[str, str]:
        """NAME -> the host:port the service must use for it."""
        return {proxy.name: proxy.listen for proxy in self.proxies}

    @property
    def real_names(self) -> dict[str, str]:
        return {proxy.name: proxy.proxy for proxy in self.proxies}
