"""Everything one probe run sets up around the service, and its undoing.

`ProbeRig(config, run_dir, upstream=..., toxiproxy_url=...)` is a context manager.
Entering it, in this order:

1. a `RunGuard` (harness.stack.lifeline: the run's lease and its janitor) when the
   probe starts something that could outlive it: the service's process, a broker it
   owns, or proxies on a Toxiproxy it does not own. The janitor stops the process
   groups and deletes those proxies if the probe dies, however it dies;
1b. the brokers the probe owns (a `messages:` entry's `process:`,
   harness.probe.brokers.process) and the dependencies it starts itself (`command:`,
   harness.probe.dependency_process; under a fake clock when the plan moves theirs),
   each started and accepting connections before anything is pointed at it;
2. the Toxiproxy: the embedded one, started here (its proxies die with it), or the one
   at `toxiproxy_url`, where every proxy is named `probe_<pid>_<token>[_NAME]`;
3. one proxy per dependency (harness.probe.service.DependencyProxies); with `provider:`,
   the payment provider (harness.probe.provider.play) and its proxy `provider`;
4. the service (`service:`), started with its placeholders filled and ready; under a
   fake clock (harness.probe.clocks) when the plan moves its clock (`clocks`);
5. the proxy `app` in front of the upstream (the service's 127.0.0.1:{port}, or the
   address given), which must accept connections.

Leaving it undoes all of it in reverse: the service stopped (its whole group), the
toxics healed, the proxies deleted from a shared Toxiproxy, the embedded one stopped,
the owned brokers stopped (SIGTERM, then SIGKILL of their groups, then their
`after_stop`), the guard left (lease removed; on an interrupt the run directory is
marked), `service.json` written (the command as run, its port, how often it was
started, each dependency's proxy) and, with owned brokers, `brokers.json` (each one's
command, address, starts and clean restarts). A failure half-way through entering
undoes what was done so far.

The rig's `targets` are the plan names of the run (harness.probe.plan_targets),
`processes` the plan's process faults (`service` to the service, an owned broker's
name to that broker; a name it lacks was refused before the run) and `check()`
raises when the service ended on its own (harness.probe.service).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

import orjson
import requests

from harness.errors import HarnessError
from harness.nemesis.clock_readers import ClockReader, date_header_reader, postgres_time_reader, redis_time_reader
from harness.nemesis.fake_clock import FakeClock
from harness.nemesis.toxiproxy_client import Nemesis, NemesisError
from harness.ports import free_ports
from harness.probe.brokers.process import OwnedBroker
from harness.probe.clocks import ProbeClocks, control_file
from harness.probe.config import ProbeConfig
from harness.probe.dependency_process import DependencyProcess
from harness.probe.plan_targets import APP, SERVICE, ProbeTargets
from harness.probe.provider.play import ProbeProvider
from harness.probe.service import LOG_NAME, DependencyProxies, ProbedService
from harness.probe.service_config import PROVIDER
from harness.stack.lifeline import RunGuard
from harness.stack.registry import ProxyClaim, refusal

HOST = "127.0.0.1"
SERVICE_RECORD = "service.json"
BROKERS_RECORD = "brokers.json"


@dataclass(frozen=True)
class DependencyRecord:
    name: str  # the config's (and the plan's) name
    proxy: str  # the proxy's name on the Toxiproxy
    listen: str  # what the service was told: {dependency.NAME}
    upstream: str  # the real dependency


@dataclass(frozen=True)
class ServiceRecord:
    """service.json of a run with `service:` (docs/probe.md, Output)."""

    command: list[str]  # placeholders filled
    port: int
    starts: int  # the first start plus one per restart or heal of a kill
    log: str
    dependencies: list[DependencyRecord]


class RigError(HarnessError):
    """The probe could not set up or tear down what surrounds the service."""


class NoProcess:
    """The plan's process faults when the probe runs no service: refused before the
    run (harness.probe.plan_targets), so these are never reached."""

    def _refuse(self, service: str) -> None:
        raise RigError(f"the probe runs no process to act on ({service!r}); give `service:` in the config")

    kill = start = pause = resume = restart = _refuse


@dataclass(frozen=True)
class BrokerRecord:
    """One owned broker in brokers.json."""

    name: str
    command: list[str]
    address: str
    starts: int
    restarts: int
    log: str


class ProbeProcesses:
    """The plan's process faults of one run: `service` goes to the service, an owned
    broker's name to that broker (harness.nemesis.faults.ProcessFaults)."""

    def __init__(self, service: ProbedService | None, brokers: dict[str, OwnedBroker], *, seed: int = 0) -> None:
        self.service = service
        self.brokers = brokers
        self.seed = seed  # with a window's name, picks the child a kill_child kills

    def _target(self, name: str) -> ProbedService | OwnedBroker | NoProcess:
        if name in self.brokers:
            return self.brokers[name]
        if name == SERVICE and self.service is not None:
            return self.service
        return NoProcess()

    def kill(self, service: str) -> None:
        self._target(service).kill(service)

    def start(self, service: str) -> None:
        self._target(service).start(service)

    def pause(self, service: str) -> None:
        self._target(service).pause(service)

    def resume(self, service: str) -> None:
        self._target(service).resume(service)

    def restart(self, service: str) -> None:
        self._target(service).restart(service)

    def kill_child(self, service: str, pick: str) -> int:
        if service != SERVICE or self.service is None:
            raise RigError(f"kill_child: the probe runs no service {service!r} with child processes")
        return self.service.kill_child(service, f"{self.seed}:{pick}")


def dependency_clock_reader(dependency: DependencyProcess) -> ClockReader:
    """How a started dependency's clock is read (its `clock:`; refused before the run without one)."""
    if dependency.clock == "postgres":
        assert dependency.clock_dsn is not None
        return postgres_time_reader(dependency.clock_dsn)
    if dependency.clock == "redis":
        return redis_time_reader(dependency.process.address)
    raise RigError(f"dependency {dependency.name!r} has no `clock:` to read its clock by")


def check_upstream(upstream: str, *, timeout: float = 3.0) -> None:
    host, _, port = upstream.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return
    except OSError as error:
        raise RigError(f"upstream {upstream} does not accept connections: {error.strerror or error}") from None


def _fewest_consumers(config: ProbeConfig) -> Callable[[], int | None] | None:
    """For `service.ready.consumers`: the fewest consumers any RabbitMQ queue of the
    config's `messages:` has now (None while one cannot be read)."""
    queues = [(message.spec.url, message.spec.queue) for message in config.messages
              if message.spec.broker == "rabbitmq"]
    if config.service is None or config.service.ready.consumers is None or not queues:
        return None

    from harness.probe.brokers.rabbitmq import consumer_count  # pika only when asked for

    def fewest() -> int | None:
        counts = [consumer_count(url, queue) for url, queue in queues]
        return None if any(count is None for count in counts) else min(c for c in counts if c is not None)

    return fewest


class ProbeRig:
    """The Toxiproxy, the proxies, the service and the guard of one probe run."""

    def __init__(self, config: ProbeConfig, run_dir: Path, *, upstream: str | None,
                 toxiproxy_url: str | None, clocks: tuple[str, ...] = ()) -> None:
        if config.service is None and not upstream:
            raise RigError("no upstream: give --upstream host:port, `upstream:` or `service:` in the config")
        self.config = config
        self.run_dir = Path(run_dir)
        self.upstream = upstream or ""
        self.toxiproxy_url = toxiproxy_url
        self.guard: RunGuard | None = None
        self.service: ProbedService | None = None
        self.nemesis: Nemesis | None = None
        self.dependencies: DependencyProxies | None = None
        self.provider: ProbeProvider | None = None  # with `provider:` (harness.probe.provider)
        self.brokers: dict[str, OwnedBroker] = {}  # the brokers the probe owns, by plan name
        self.started: dict[str, OwnedBroker] = {}  # the dependencies it starts itself, by name
        self.app_proxy = APP
        self.proxy_url = ""
        self.clock_names = clocks  # the processes started under a fake clock (harness.probe.clocks)
        self.clocks = ProbeClocks()
        self._stack = ExitStack()

    @property
    def shared(self) -> bool:
        """True on a Toxiproxy the probe does not own (its proxies must be deleted)."""
        return bool(self.toxiproxy_url)

    @property
    def toxiproxy(self) -> str:
        """How result.json names the Toxiproxy: `embedded` or its URL."""
        return self.toxiproxy_url or "embedded"

    @property
    def targets(self) -> ProbeTargets:
        names = self.dependencies.real_names if self.dependencies is not None else {}
        return ProbeTargets(proxies={APP: self.app_proxy, **names}, service=self.service is not None,
                            brokers=(*self.brokers, *self.started),
                            started=tuple(name for name, process in self.config.dependency_processes.items()
                                          if process.clock is not None),
                            protocols=dict(self.config.dependency_protocols))

    @property
    def processes(self) -> ProbeProcesses:
        return ProbeProcesses(self.service, {**self.brokers, **self.started}, seed=self.config.load.seed)

    def check(self) -> None:
        """Raise (ServiceFailed) when the service ended on its own."""
        if self.service is not None:
            self.service.check()

    # --- entering ---------------------------------------------------------------------

    def __enter__(self) -> ProbeRig:
        try:
            self._enter()
        except BaseException:
            self._stack.close()
            raise
        return self

    def _enter(self) -> None:
        config = self.config
        owned = [message.spec.process for message in config.messages if message.spec.process is not None]
        if config.service is not None or self.shared or owned or config.dependency_processes:
            self.guard = self._stack.enter_context(RunGuard(self.run_dir))
        if owned:
            self._stack.callback(self._record_brokers)
        for process in owned:
            broker = OwnedBroker(process, log_path=self.run_dir / f"broker-{process.name}.log", base_env=os.environ,
                                 guard=self.guard)
            self._stack.callback(broker.stop)
            self.brokers[process.name] = broker
            broker.start()
        for name, dependency in config.dependency_processes.items():
            env = dict(os.environ)
            if name in self.clock_names:
                clock = FakeClock(self._shared_control_file(name)).create()
                env.update(clock.environment(env))
                self.clocks.add(name, clock, dependency_clock_reader(dependency))
            started = OwnedBroker(dependency.process, log_path=self.run_dir / f"dependency-{name}.log",
                                  base_env=env, guard=self.guard, role="dependency")
            self._stack.callback(started.stop)
            self.started[name] = started
            started.start()
        if self.shared:
            assert self.toxiproxy_url is not None
            url = self.toxiproxy_url
            self.app_proxy = f"probe_{os.getpid()}_{os.urandom(2).hex()}"
        else:
            from harness.toxiproxy.server import EmbeddedToxiproxy

            embedded = EmbeddedToxiproxy().start()
            self._stack.callback(embedded.stop)
            url = embedded.url
        if self.guard is not None:
            self.guard.use_toxiproxy(url, local=not self.shared)
        self.nemesis = nemesis = Nemesis(url)
        provider = config.provider is not None
        ports = free_ports(1 + len(config.dependencies) + provider + (config.service is not None))
        listen_port, dependency_ports = ports[0], ports[1:1 + len(config.dependencies)]
        self._stack.callback(self._remove_proxies)
        self.dependencies = DependencyProxies(nemesis, prefix=f"{self.app_proxy}_" if self.shared else "",
                                              recorder=self.guard)
        self.dependencies.create(config.dependencies, dependency_ports)
        if config.provider is not None:  # harness.probe.provider: behind the proxy `provider`
            self.provider = ProbeProvider(config.provider, seed=config.load.seed, run_dir=self.run_dir)
            self._stack.callback(self.provider.stop)
            self.provider.start(f"http://{HOST}:{ports[-1]}" if config.service is not None
                                else f"http://{self.upstream}")
            self.dependencies.create({PROVIDER: self.provider.address}, [ports[1 + len(config.dependencies)]])
        if config.service is not None:
            base_env = dict(os.environ)
            if SERVICE in self.clock_names:
                clock = FakeClock(control_file(self.run_dir, SERVICE)).create()
                base_env.update(clock.environment(base_env))
                self.clocks.add(SERVICE, clock, date_header_reader(
                    f"http://{HOST}:{ports[-1]}{config.service.ready.path or '/'}"))
            self.service = ProbedService(config.service, port=ports[-1], dependencies=self.dependencies.addresses,
                                         log_path=self.run_dir / LOG_NAME, base_env=base_env, guard=self.guard,
                                         consumers=_fewest_consumers(config))
            self._stack.callback(self._record_service)
            self._stack.callback(self.service.stop)
            self.service.start()
            self.upstream = self.service.address
        if config.service is None or config.service.listens:
            check_upstream(self.upstream)  # a worker that is not told a port has none to check
        listen = f"{HOST}:{listen_port}"
        if self.guard is not None and self.shared:
            self.guard.proxy_created(ProxyClaim(self.app_proxy, listen, self.upstream))
        nemesis.ensure_proxy(self.app_proxy, listen, self.upstream)
        self.proxy_url = f"http://{listen}"

    def _shared_control_file(self, name: str) -> Path:
        """A dependency's clock control file, in a folder every user can read: the
        dependency may run as another user (PostgreSQL refuses root: `runuser -u
        postgres`), for whom the run directory (under a 0700 home or pytest's 0700
        temporary folder) is out of reach, and libfaketime then silently keeps the real
        time. The folder is removed on leaving, the last offset copied to
        `clocks/NAME.offset` of the run first."""
        folder = Path(tempfile.mkdtemp(prefix=f"harness-clock-{name}-"))
        folder.chmod(0o755)
        path = folder / f"{name}.offset"

        def keep() -> None:
            record = control_file(self.run_dir, name)
            record.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                shutil.copyfile(path, record)
            shutil.rmtree(folder, ignore_errors=True)

        self._stack.callback(keep)
        return path

    # --- leaving ----------------------------------------------------------------------

    def _record_service(self) -> None:
        """`service.json`: what the probe ran and put in front of it, once it is stopped."""
        service = self.service
        if service is None:
            return
        record = ServiceRecord(
            command=service.argv, port=service.port, starts=service.starts, log=LOG_NAME,
            dependencies=[DependencyRecord(name=proxy.name, proxy=proxy.proxy, listen=proxy.listen,
                                           upstream=proxy.upstream)
                          for proxy in (self.dependencies.proxies if self.dependencies else [])])
        (self.run_dir / SERVICE_RECORD).write_bytes(orjson.dumps(record, option=orjson.OPT_INDENT_2))

    def _record_brokers(self) -> None:
        """`brokers.json`: what the probe ran as brokers and how often it started them."""
        records = [BrokerRecord(name=name, command=list(broker.config.command), address=broker.config.address,
                                starts=broker.starts, restarts=broker.restarts, log=broker.log_path.name)
                   for name, broker in self.brokers.items()]
        (self.run_dir / BROKERS_RECORD).write_bytes(orjson.dumps(records, option=orjson.OPT_INDENT_2))

    def heal(self) -> None:
        """Remove every toxic and re-enable every proxy of this run (after the load)."""
        if self.nemesis is None:
            return
        ours = set(self.targets.proxies.values())
        try:
            for toxic in self.nemesis.list_toxics():
                if toxic.proxy in ours:
                    self.nemesis.remove_toxic(toxic.proxy, toxic.name)
            for name, proxy in self.nemesis.proxies().items():
                if name in ours and not proxy.enabled:
                    self.nemesis.enable_proxy(name)
        except NemesisError as error:
            raise RigError(f"could not heal the probe's proxies: {error}") from None

    def _remove_proxies(self) -> None:
        self.heal()
        if not self.shared or self.nemesis is None:
            return  # the embedded Toxiproxy takes its proxies with it
        failed = []
        for proxy in self.targets.proxies.values():
            try:
                refused = refusal(requests.delete(f"{self.nemesis.api_url}/proxies/{quote(proxy, safe='')}",
                                                  timeout=5))
                if refused is not None:
                    failed.append(f"{proxy} ({refused})")
                    continue
            except requests.RequestException as error:
                failed.append(f"{proxy} ({error})")
                continue
            if self.guard is not None:
                self.guard.proxy_deleted(proxy)
        if failed:
            raise RigError(f"could not delete the probe's proxies: {', '.join(failed)}")

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stack.__exit__(kind, value, traceback)
