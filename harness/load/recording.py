"""Per-process load setup for Locust: options, settings, and where the history goes.

A locustfile calls `install(events)` once at import (that is how Locust wires
listeners). It registers the harness options on Locust's parser
(`harness.load.settings`) and, per Locust process:

- standalone (no master): a `LoadProcess` whose history writer appends to one file
  of its own in the history directory;
- a worker: a `LoadProcess` whose history goes to the master as messages
  (`harness.load.transport.HistoryForwarder`);
- the master: no users, a `HistoryCollector` that writes each worker's batches to a
  file per worker, so one run directory holds every worker's history.

Settings are resolved where the run is driven (standalone or master) at `init` and
again at each `test_start` (the web UI's form may have changed them), and written
back into `environment.parsed_options`, which Locust sends to every worker with its
spawn message; a worker reads its settings from there at `test_start`. A stack
found by `--harness-root` supplies the target host and a default history directory
(`runs/swarm-<time>-<pid>/histories`).

A `LoadProcess` holds its settings, its history sink, a timer greenlet that flushes
the sink while the load idles, the counters that hand out user numbers and ids, and
the token of the run's shared key pool (the same in every process of a run, so
tenants in different processes collide on purpose). Users reach it through
`load_process(environment)`. The sink is closed (a worker: its final batch sent) at
`test_stop` and `quitting`, so nothing is lost at stop, and reopened if the test is
started again from the web UI.

`recorded_operation(client, events, call, ...)` is the one way a user's operation is
recorded, whatever carries it (an HTTP request, an XADD to the stream, the probe's
requests): the invoke, the call, exactly one completion (`ok` / `fail` / `info` as
the call classifies its answer; `info` whenever the call raised, because the effect
may have happened), and one entry in Locust's request statistics.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import random
import socket
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, TypeVar

import gevent
import locust.runners as locust_runners
import redis
from locust.env import Environment
from locust.event import EventHook, Events
from locust.runners import STATE_STOPPED, MasterRunner, WorkerRunner

from harness.history import DEFAULT_TENANT, Client, HistoryWriter, RecordSink, history_path
from harness.load.run_time import install_run_time
from harness.load.settings import LoadSettings, add_options, swarm_history_dir
from harness.load.toxics import ToxicWatch
from harness.load.transport import (
    ACK_MESSAGE,
    BATCH_MESSAGE,
    FINISH_MESSAGE,
    HistoryCollector,
    HistoryForwarder,
)
from harness.names import ENV_REDIS_URL, LOAD_STARTED

FLUSH_INTERVAL = 1.0
# A worker's SIGTERM: how long its final batch may take to be acknowledged.
QUIT_ACK_TIMEOUT = 10.0
# On top of Locust's --stop-timeout: how long the master waits for final batches.
FINISH_MARGIN = 10.0
# Heartbeats (one a second) a master lets a worker miss before it is missing (on_init).
WORKER_HEARTBEAT_LIVENESS = 15
_ATTRIBUTE = "harness_load_process"
_COLLECTOR = "harness_history_collector"
_SWARM_HISTORY = "harness_swarm_history"

# An error's description in a record is cut to this many characters.
ERROR_CHARS = 300
_NO_FIELDS: Mapping[str, Any] = MappingProxyType({})

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Completion(Generic[T]):
    """How a call that returned ended: what the history and Locust's statistics record.

    `fields` go into the completion record; `failure` is what Locust counts as the
    request's failure (None: a success in its statistics, whatever `kind` is).
    """

    kind: str  # "ok" | "fail" | "info"
    value: T
    fields: Mapping[str, Any] = field(default_factory=dict)
    length: int = 0  # the answer's length in bytes, for Locust's statistics
    failure: Exception | None = None


@dataclass(frozen=True)
class Recorded(Generic[T]):
    """A recorded operation's end: the call's value, or None and `error` when it raised."""

    kind: str
    value: T | None
    error: str | None = None


def describe(error: BaseException) -> str:
    """An exception as a record's `error`: its type and message, cut to ERROR_CHARS."""
    return f"{type(error).__name__}: {error}"[:ERROR_CHARS]


def recorded_operation(
    client: Client,
    events: Events,
    call: Callable[[], Completion[T]],
    *,
    op: str,
    request_type: str,
    name: str,
    tenant: str = DEFAULT_TENANT,
    expect: str | None = None,
    fields: Mapping[str, Any] = _NO_FIELDS,
    unanswered: Mapping[str, Any] = _NO_FIELDS,
) -> Recorded[T]:
    """Invoke `op` with `fields`, run `call`, record its one completion, report it to Locust.

    A call that raises completes as `info` with `unanswered` and the error's
    description (any exception: a stray type must not leave the operation
    outstanding, or this client could never invoke again), and is a Locust failure.
    """
    operation = client.invoke(op, tenant=tenant, expect=expect, **fields)
    started = time.perf_counter()
    recorded: Recorded[T]
    failure: Exception | None
    try:
        done = call()
    except Exception as error:  # noqa: BLE001 - whatever broke, the effect is unknown
        recorded = Recorded("info", None, describe(error))
        operation.info(**unanswered, error=recorded.error)
        length, failure = 0, error
    else:
        operation.complete(done.kind, **done.fields)
        recorded = Recorded(done.kind, done.value)
        length, failure = done.length, done.failure
    report_request(events, request_type=request_type, name=name, started=started,
                   length=length, failure=failure)
    return recorded


def report_request(events: Events, *, request_type: str, name: str, started: float, length: int,
                   failure: Exception | None) -> None:
    """One entry in Locust's request statistics; `started` is a time.perf_counter()."""
    events.request.fire(  # type: ignore[no-untyped-call]  # Locust's EventHook is unannotated
        request_type=request_type,
        name=name,
        response_time=(time.perf_counter() - started) * 1000.0,
        response_length=length,
        exception=failure,
        context={},
    )


def listen(hook: EventHook, handler: Callable[..., Any]) -> None:
    """`hook.add_listener(handler)`, typed: Locust's EventHook is unannotated."""
    hook.add_listener(handler)  # type: ignore[no-untyped-call]


class LoadProcess:
    """What the users of one Locust process share: settings, history, id counters."""

    def __init__(self, environment: Environment, settings: LoadSettings) -> None:
        self.environment = environment
        self.worker = worker_name()
        # A short random token makes ids unique across runs against the same Redis,
        # where pids repeat; the seed still drives every behavioural choice.
        self.token = os.urandom(3).hex()
        self.settings = settings
        self.shared_token = shared_token(settings)
        self.writer: HistoryWriter | None = None
        self.forwarder: HistoryForwarder | None = None
        self._users = itertools.count(1)
        self._flusher: gevent.Greenlet | None = None
        self._redis: redis.Redis | None = None
        self.toxic_watch: ToxicWatch | None = None

    @property
    def distributed(self) -> bool:
        return isinstance(self.environment.runner, WorkerRunner)

    @property
    def path(self) -> Path | None:
        """This process's own history file (standalone only; a worker's is on the master)."""
        if self.settings.history_dir is None or self.distributed:
            return None
        return history_path(self.settings.history_dir, worker=self.worker)

    @property
    def sink(self) -> RecordSink | None:
        return self.writer if self.writer is not None else (
            self.forwarder if self.forwarder is not None and self.settings.history_dir else None)

    def configure(self, settings: LoadSettings) -> None:
        """New settings for the next test (only between tests: users read them at start)."""
        if settings != self.settings:
            # Not an end of test: a worker sends no final batch for this.
            self.close(final=False)
            if self._redis is not None:
                self._redis.close()
                self._redis = None
        self.settings = settings
        self.shared_token = shared_token(settings)

    def open(self) -> None:
        if self.distributed:
            if self.forwarder is None:
                self.forwarder = HistoryForwarder(self.environment.runner, self.worker)
        elif self.path is not None and self.writer is None:
            self.writer = HistoryWriter(self.path, flush_interval=FLUSH_INTERVAL)
        if self.sink is not None and self._flusher is None:
            self._flusher = gevent.spawn(self._flush_forever)
        if self.settings.toxiproxy_url and self.settings.fresh_connections and self.toxic_watch is None:
            self.toxic_watch = ToxicWatch(self.settings.toxiproxy_url)
            self.toxic_watch.start()

    def toxic_hit(self) -> bool | None:
        """Was a toxic active on the app proxy as this request's connection opened?"""
        return None if self.toxic_watch is None else self.toxic_watch.faulted

    def close(self, *, final: bool = True) -> None:
        """End of a test: the history closed (a worker: the final batch sent, not awaited)."""
        if self._flusher is not None:
            self._flusher.kill(block=False)
            self._flusher = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.forwarder is not None and self.settings.history_dir:
            if final:
                self.forwarder.finish()
            else:
                self.forwarder.flush()
        if self.toxic_watch is not None:
            self.toxic_watch.stop()
            self.toxic_watch = None

    def new_client(self) -> Client:
        """A fresh Jepsen process for one user (or one concurrent branch of a user)."""
        self.open()
        return Client(self.sink, worker=self.worker, user=next(self._users))

    def rng_for(self, client: Client) -> random.Random:
        # Seeded by user number only, so a single-process run repeats its choices.
        return random.Random(f"{self.settings.seed}:{client.user}")

    def redis(self) -> redis.Redis:
        if self.settings.redis_url is None:
            raise RuntimeError(f"no Redis: give --harness-redis-url (or ${ENV_REDIS_URL}, or run "
                               "against a `harness up` stack); this scenario publishes to the stream")
        if self._redis is None:
            self._redis = redis.Redis.from_url(
                self.settings.redis_url,
                socket_timeout=self.settings.request_timeout,
                socket_connect_timeout=self.settings.request_timeout,
            )
        return self._redis

    def _flush_forever(self) -> None:
        # Records are flushed on write after FLUSH_INTERVAL too; this covers idle load.
        while True:
            gevent.sleep(FLUSH_INTERVAL)
            sink = self.sink
            if sink is not None:
                sink.flush()


def shared_token(settings: LoadSettings) -> str:
    """The token of the run's shared key pool, the same in every load process of a run.

    Derived from the seed and the run's history directory (each run has its own;
    the master resolves it to an absolute path before workers see it), so processes
    agree without talking, and a later run on the same stack does not reuse an
    earlier run's keys.
    """
    directory = settings.history_dir
    where = "" if directory is None else str(directory if directory.is_absolute() else directory.resolve())
    return hashlib.sha256(f"{settings.seed}:{where}".encode()).hexdigest()[:10]


def worker_name() -> str:
    """`w<pid>h<host hash>`: unique per load process, also across compose containers."""
    host = zlib.crc32(socket.gethostname().encode()) & 0xFFFF
    return f"w{os.getpid()}h{host:04x}"


def load_process(environment: Environment) -> LoadProcess:
    process = getattr(environment, _ATTRIBUTE, None)
    if not isinstance(process, LoadProcess):
        raise RuntimeError("harness.load.recording.install(events) was not called by the locustfile")
    return process


def resolve_settings(environment: Environment) -> LoadSettings:
    """Settings from parsed_options, written back resolved (so workers get them).

    Where the run is driven, a discovered stack also gives the target host when none
    was given and a history directory of the swarm's own, chosen once per Locust
    process (the web UI's form posts the option empty again at each start).
    """
    options = environment.parsed_options
    settings = LoadSettings.from_options(options if options is not None else {})
    if settings.history_dir is not None and not settings.history_dir.is_absolute():
        settings = replace(settings, history_dir=settings.history_dir.resolve())
    if settings.stack_root is not None:
        if not environment.host and settings.host:
            environment.host = settings.host
            if options is not None:
                options.host = settings.host
        if settings.history_dir is None:
            chosen = getattr(environment, _SWARM_HISTORY, None) or swarm_history_dir()
            setattr(environment, _SWARM_HISTORY, chosen)
            settings = replace(settings, history_dir=chosen)
    if options is not None:
        vars(options).update(settings.to_options())
    return settings


def install(events: Events) -> None:
    """Register the options and the listeners that give each Locust process its part."""

    def on_parser(parser: Any, **_: Any) -> None:
        add_options(parser)

    def on_init(environment: Environment, **_: Any) -> None:
        runner = environment.runner
        if isinstance(runner, WorkerRunner):
            process = LoadProcess(environment, LoadSettings.from_options(environment.parsed_options or {},
                                                                         discover=False))
            setattr(environment, _ATTRIBUTE, process)
            _install_worker(environment, process)
            return
        settings = resolve_settings(environment)
        if isinstance(runner, MasterRunner):
            # Locust reads this each time a worker reports; its 3 declared a worker
            # missing after about 4 s without a heartbeat, and a busy machine starves
            # workers that long (CI at load 15: both workers just after the spawn, and
            # the master stopped the test). A worker that really died is seen later.
            locust_runners.HEARTBEAT_LIVENESS = max(locust_runners.HEARTBEAT_LIVENESS, WORKER_HEARTBEAT_LIVENESS)
            collector = HistoryCollector(runner)
            setattr(environment, _COLLECTOR, collector)
            runner.register_message(BATCH_MESSAGE, lambda msg, **_: collector.on_batch(msg))
            listen(environment.events.quitting,
                   lambda environment, **_: _finish(environment, "quitting", close=True))
            return
        setattr(environment, _ATTRIBUTE, LoadProcess(environment, settings))

    def on_test_start(environment: Environment, **_: Any) -> None:
        runner = environment.runner
        if isinstance(runner, WorkerRunner):
            # parsed_options now hold the master's values (the spawn message carried them).
            settings = LoadSettings.from_options(environment.parsed_options or {})
        else:
            settings = resolve_settings(environment)
            if settings.history_dir is not None:
                logger.info("harness: recording histories in %s", settings.history_dir)
                # The load begins now (a master waited for its workers): the runner
                # starts the fault plan's clock on this file.
                settings.history_dir.mkdir(parents=True, exist_ok=True)
                (settings.history_dir / LOAD_STARTED).write_text(f"{time.time()}\n")
        collector = getattr(environment, _COLLECTOR, None)
        if collector is not None:
            collector.begin(settings.history_dir)
        process = getattr(environment, _ATTRIBUTE, None)
        if process is not None:
            process.configure(settings)
            process.open()

    def on_test_stop(environment: Environment, **_: Any) -> None:
        process = getattr(environment, _ATTRIBUTE, None)
        if process is not None:
            process.close()
        if getattr(environment, _COLLECTOR, None) is not None:
            _finish(environment, "test_stop", close=False)

    def on_quitting(environment: Environment, **_: Any) -> None:
        process = getattr(environment, _ATTRIBUTE, None)
        if process is not None and not isinstance(environment.runner, WorkerRunner):
            process.close()

    install_run_time(events)  # the load's length from its first user (LocustProcess passes it)
    listen(events.init_command_line_parser, on_parser)
    listen(events.init, on_init)
    listen(events.test_start, on_test_start)
    listen(events.test_stop, on_test_stop)
    listen(events.quitting, on_quitting)


def _finish(environment: Environment, reason: str, *, close: bool) -> None:
    """The master: every connected worker's final batch, before Locust tells them to quit."""
    collector: HistoryCollector = getattr(environment, _COLLECTOR)
    if collector.directory is not None:  # nothing recorded: no final batch to wait for
        collector.finish_workers(float(environment.stop_timeout or 0) + FINISH_MARGIN,
                                 reason=reason)
    if close:
        collector.close()


def _install_worker(environment: Environment, process: LoadProcess) -> None:
    runner: WorkerRunner = environment.runner  # type: ignore[assignment]

    def on_ack(msg: Any, **_: Any) -> None:
        if process.forwarder is not None:
            process.forwarder.on_ack(int(msg.data["sequence"]))

    def on_finish(msg: Any, **_: Any) -> None:
        # The master is quitting and wants this worker's last records first. Stopping
        # the users fires test_stop, which sends the final batch.
        if runner.state != STATE_STOPPED:
            runner.stop()
        else:
            _send_final(process)

    def on_quitting(environment: Environment, **_: Any) -> None:
        # Registered at init, after Locust's own worker listener: with reverse=True
        # this runs first, while the worker still receives (a SIGTERM), and before
        # the master hears that this worker quit.
        if runner.state != STATE_STOPPED:
            runner.stop()
        forwarder = process.forwarder
        if forwarder is None or not process.settings.history_dir:
            return
        if forwarder.unacknowledged and len(runner.greenlet) > 0:
            if not forwarder.wait_acknowledged(QUIT_ACK_TIMEOUT):
                logger.error("harness: the master did not acknowledge %d history records within %.0f s",
                             forwarder.unacknowledged, QUIT_ACK_TIMEOUT)
        elif forwarder.unacknowledged:
            logger.warning("harness: quitting with %d history records not acknowledged by the master",
                           forwarder.unacknowledged)
        logger.info("harness: %d history records sent to the master, %d acknowledged",
                    forwarder.records_sent, forwarder.records_acked)

    runner.register_message(ACK_MESSAGE, on_ack)
    runner.register_message(FINISH_MESSAGE, on_finish)
    listen(environment.events.quitting, on_quitting)


def _send_final(process: LoadProcess) -> None:
    if process.forwarder is None:
        process.forwarder = HistoryForwarder(process.environment.runner, process.worker)
    process.forwarder.finish()
