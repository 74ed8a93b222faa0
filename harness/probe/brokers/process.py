"""A broker the probe owns: started before the consumer, restarted by a plan, stopped after.

A `messages:` entry may give its broker's process (`process:`); the probe then starts
it, and a plan may fault it by its name like the service's process:

    messages:
      - name: payments
        broker: rabbitmq
        url: amqp://guest:guest@127.0.0.1:5672/%2F
        process:                          # the probe starts, owns and may restart this broker
          name: broker                    # the plan's name for it: {process: {action: restart, service: broker}}
          command: [/usr/lib/rabbitmq/bin/rabbitmq-server]
          env: {RABBITMQ_NODE_PORT: "5672", RABBITMQ_MNESIA_BASE: /tmp/rabbit/mnesia}
          cwd: /tmp/rabbit                # default: the current directory (relative: to the config file)
          ready: {timeout: 60s}           # ready once the url's host:port accepts connections
          stop_timeout: 15s               # SIGTERM, then SIGKILL of its process group after this
          after_stop: [epmd, -port, "4370", -kill]   # run once after the last stop (bounded, 10 s)

`BrokerProcessConfig` is the checked entry (`parse_broker_process`, every error the
config's one-line error naming the field). `OwnedBroker` runs it the way the probe runs
its service (harness.stack.services: a process group of its own, a parent-death
SIGKILL, SIGTERM then SIGKILL of the group), logging to `broker-<name>.log` of the run
directory, every incarnation entered on the run's lease so the janitor stops it if the
probe dies. It is a plan's process target: `restart` is a clean restart (SIGTERM, wait
for the group to end, start, wait until its address accepts connections again: a
restart that does not come back is a fault that failed, which ends the run, exit 2),
`kill` is SIGKILL (its window's end starts it again), `pause`/`resume` SIGSTOP/SIGCONT.
Only brokers bound to a loopback address can be owned: the probe never starts or stops
anything it cannot see on 127.0.0.1.

Processes are spawned from one long-lived thread of their own (Linux sends the
parent-death signal when the forking *thread* ends, and restarts come from the
nemesis's thread, which ends first).
"""

from __future__ import annotations

import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from harness.errors import HarnessError
from harness.fieldcheck import FieldChecker
from harness.probe.service_config import check_plan_target_name
from harness.process_handle import ProcessGuard
from harness.stack import services as svc

KEYS = ("name", "command", "env", "cwd", "ready", "stop_timeout", "after_stop")
DEFAULT_NAME = "broker"
DEFAULT_READY_TIMEOUT = 60.0
DEFAULT_STOP_TIMEOUT = 15.0
AFTER_STOP_TIMEOUT = 10.0
READY_POLL = 0.2
LOOPBACK = ("127.0.0.1", "localhost")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
T = TypeVar("T")


class BrokerProcessFailed(HarnessError):
    """The owned broker did not start, did not come back after a restart, or could not be stopped."""


@dataclass(frozen=True)
class BrokerProcessConfig:
    """How the probe runs a broker it owns; `address` is the host:port of the entry's url."""

    name: str
    command: tuple[str, ...]
    address: str
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    ready_timeout: float = DEFAULT_READY_TIMEOUT
    stop_timeout: float = DEFAULT_STOP_TIMEOUT
    after_stop: tuple[str, ...] = ()

    def beside(self, config_file: Path) -> BrokerProcessConfig:
        """A relative `cwd` taken relative to the config file's folder."""
        if self.cwd is None or self.cwd.is_absolute():
            return self
        return replace(self, cwd=(config_file.parent / self.cwd).resolve())

    def to_raw(self) -> dict[str, Any]:
        """The plain form `parse_broker_process` reads back (config.json)."""
        raw: dict[str, Any] = {"name": self.name, "command": list(self.command), "env": dict(self.env),
                               "ready": {"timeout": self.ready_timeout}, "stop_timeout": self.stop_timeout}
        if self.cwd is not None:
            raw["cwd"] = str(self.cwd)
        if self.after_stop:
            raw["after_stop"] = list(self.after_stop)
        return raw


def parse_broker_process(where: FieldChecker, raw: Any, path: str, url: str) -> BrokerProcessConfig:
    """`process:` of a `messages:` entry whose broker listens at `url` (already checked)."""
    spec = where.mapping(raw, path, required=("command",), optional=tuple(k for k in KEYS if k != "command"))
    name = check_plan_target_name(where, spec.get("name", DEFAULT_NAME), f"{path}.name")
    parts = urlsplit(url)
    if parts.hostname not in LOOPBACK or parts.port is None:
        raise where.error(f"{path}", f"the probe owns only a broker on 127.0.0.1 with an explicit port; "
                          f"the entry's url is {url!r}")
    command = _argv(where, spec["command"], f"{path}.command")
    if not command:
        raise where.error(f"{path}.command", "must be a non-empty list of arguments")
    env_raw = spec.get("env") or {}
    env_spec = where.mapping(env_raw, f"{path}.env", optional=tuple(env_raw) if isinstance(env_raw, dict) else ())
    env: dict[str, str] = {}
    for key, value in env_spec.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise where.error(f"{path}.env.{key}", "must be an environment variable name")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise where.error(f"{path}.env.{key}", f"must be a string, not {value!r}")
        env[key] = str(value)
    cwd = spec.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd.strip()):
        raise where.error(f"{path}.cwd", f"must be a folder's path, not {cwd!r}")
    ready = where.mapping(spec.get("ready") or {}, f"{path}.ready", optional=("timeout",))
    ready_timeout = where.duration(ready.get("timeout", DEFAULT_READY_TIMEOUT), f"{path}.ready.timeout")
    stop_timeout = where.duration(spec.get("stop_timeout", DEFAULT_STOP_TIMEOUT), f"{path}.stop_timeout")
    for key, value in ((f"{path}.ready.timeout", ready_timeout), (f"{path}.stop_timeout", stop_timeout)):
        if value <= 0:
            raise where.error(key, "must be longer than 0s")
    after_stop = _argv(where, spec.get("after_stop") or [], f"{path}.after_stop")
    host = "127.0.0.1" if parts.hostname == "localhost" else parts.hostname
    return BrokerProcessConfig(name=name, command=tuple(command), address=f"{host}:{parts.port}", env=env,
                               cwd=Path(cwd) if cwd else None, ready_timeout=ready_timeout,
                               stop_timeout=stop_timeout, after_stop=tuple(after_stop))


def _argv(where: FieldChecker, raw: Any, path: str) -> list[str]:
    if not isinstance(raw, list):
        raise where.error(path, "must be a list of arguments")
    argv = []
    for i, arg in enumerate(raw):
        if isinstance(arg, bool) or not isinstance(arg, (str, int, float)):
            raise where.error(f"{path}[{i}]", f"must be a string, not {arg!r}")
        argv.append(str(arg))
    return argv


def accepts_connections(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


class OwnedBroker:
    """One broker process of the probe's: `start()`, the plan's process faults, `stop()`."""

    def __init__(self, config: BrokerProcessConfig, *, log_path: Path, base_env: Mapping[str, str],
                 guard: ProcessGuard | None = None, role: str = "broker") -> None:
        """`role` names it in errors: `broker`, or `dependency` for one of the config's
        `dependencies:` the probe starts itself (harness.probe.dependency_process)."""
        self.config = config
        self.role = role
        self.guard = guard
        port = int(config.address.rpartition(":")[2])
        self._service = svc.Service(svc.ServiceSpec(
            name=config.name, argv=list(config.command), env={**base_env, **config.env}, log_path=log_path,
            port=port, check=lambda: accepts_connections(config.address), cwd=config.cwd))
        self._lock = threading.RLock()
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"probe-broker-{config.name}")
        self.starts = 0  # incarnations started (the first start plus one per restart or heal of a kill)
        self.restarts = 0  # clean restarts (SIGTERM, wait, start) the plan made
        self._stopped = False

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def pid(self) -> int | None:
        return self._service.pid

    @property
    def log_path(self) -> Path:
        return self._service.spec.log_path

    def _on_spawner(self, action: Callable[[], T]) -> T:
        return self._spawner.submit(action).result()

    def start(self, name: str | None = None) -> None:
        """Start it and wait until its address accepts connections (BrokerProcessFailed)."""
        self._named(name)
        with self._lock:
            if self._stopped:
                raise BrokerProcessFailed(f"{self.role} {self.name}: stopped for good; the probe is ending")
            if self._service.running():
                return  # a heal after a fault that found it running
            if accepts_connections(self.config.address):
                raise BrokerProcessFailed(f"{self.role} {self.name}: {self.config.address} is already taken: something "
                                          "else listens there, and the probe must own the broker it restarts")
            try:
                self._on_spawner(self._service.start)
            except (svc.ServiceError, OSError) as error:
                raise BrokerProcessFailed(f"{self.role} {self.name}: could not start {self.config.command[0]!r}: "
                                          f"{error}") from None
            pid = self._service.pid
            if self.guard is not None and pid is not None:
                self.guard.add_process(pid, f"broker-{self.name}")
            self.starts += 1
            try:
                self._service.wait_healthy(self.config.ready_timeout, interval=READY_POLL)
            except svc.ServiceError:
                self._failed(f"did not accept connections on {self.config.address} within "
                             f"{self.config.ready_timeout:g}s" if self._service.running()
                             else "exited before it accepted connections")

    def restart(self, name: str | None = None) -> None:
        """A clean restart: SIGTERM, wait for the group to end (SIGKILL after the stop
        timeout), start again and wait until it accepts connections."""
        self._named(name)
        with self._lock:
            self._terminate()
            deadline = time.monotonic() + self.config.stop_timeout
            while accepts_connections(self.config.address, timeout=0.2) and time.monotonic() < deadline:
                time.sleep(READY_POLL)  # a listener left by a straggler: wait, never start beside it
            self.restarts += 1
            self.start()

    def kill(self, name: str | None = None) -> None:
        self._named(name)
        with self._lock:
            self._service.kill()
            self._forget()

    def pause(self, name: str | None = None) -> None:
        self._named(name)
        with self._lock:
            self._service.pause()

    def resume(self, name: str | None = None) -> None:
        self._named(name)
        with self._lock:
            self._service.resume()

    def stop(self) -> None:
        """For good: SIGTERM, SIGKILL of the group after the stop timeout, then `after_stop`. Safe to repeat."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            try:
                self._terminate()
            finally:
                self._spawner.shutdown(wait=True)
                self._after_stop()

    def _terminate(self) -> None:
        try:
            self._on_spawner(lambda: self._service.stop(self.config.stop_timeout))
        except svc.ServiceError as error:
            raise BrokerProcessFailed(f"{self.role} {self.name}: could not be stopped: {error}") from None
        finally:
            self._forget()

    def _after_stop(self) -> None:
        if not self.config.after_stop:
            return
        try:
            subprocess.run(list(self.config.after_stop), env={**self._service.spec.env}, cwd=self.config.cwd,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=AFTER_STOP_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise BrokerProcessFailed(f"{self.role} {self.name}: after_stop {self.config.after_stop[0]!r} failed: "
                                      f"{error}") from None

    def _named(self, name: str | None) -> None:
        if name is not None and name != self.name:
            raise BrokerProcessFailed(f"{self.role} {self.name!r} is not {name!r}")

    def _forget(self) -> None:
        pid = self._service.pid
        if self.guard is not None and pid is not None:
            self.guard.remove_process(pid)

    def _failed(self, what: str) -> None:
        tail = svc.tail(self.log_path).rstrip()
        try:
            self._on_spawner(lambda: self._service.stop(self.config.stop_timeout))
        except svc.ServiceError:
            pass  # the error below says what matters; the janitor has the group on record
        self._forget()
        raise BrokerProcessFailed(f"{self.role} {self.name} `{' '.join(self.config.command)}` {what}; "
                                  f"end of {self.log_path}:\n{tail or '(empty)'}")
