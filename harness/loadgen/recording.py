"""Per-process recording setup for Locust: one history file per load process.

A locustfile calls `install(events)` once at import (that is how Locust wires
listeners). At `init` every process that runs users (a standalone runner or a
worker, never the master) gets a `LoadProcess`: its settings, its history writer,
a timer greenlet that flushes the writer while the load idles, the counters that
hand out user numbers and ids, and the token of the run's shared key pool (the same
in every process of a run, so tenants in different processes collide on purpose). Users reach it through `load_process(environment)`.
The writer is closed at `test_stop` and `quitting`, so nothing is lost at stop, and
reopened (appending to the same file) if the test is started again from the web UI.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import socket
import zlib
from pathlib import Path
from typing import Any

import gevent
import redis
from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner

from harness.history import Client, HistoryWriter, history_path
from harness.loadgen.settings import LoadSettings
from harness.loadgen.toxics import ToxicWatch

FLUSH_INTERVAL = 1.0
_ATTRIBUTE = "harness_load_process"


class LoadProcess:
    """What the users of one Locust process share: settings, history, id counters."""

    def __init__(self, environment: Environment, settings: LoadSettings) -> None:
        self.environment = environment
        self.settings = settings
        self.worker = worker_name()
        # A short random token makes ids unique across runs against the same Redis,
        # where pids repeat; the seed still drives every behavioural choice.
        self.token = os.urandom(3).hex()
        self.shared_token = shared_token(settings)
        self.path: Path | None = (
            history_path(settings.history_dir, worker=self.worker) if settings.history_dir else None
        )
        self.writer: HistoryWriter | None = None
        self._users = itertools.count(1)
        self._flusher: gevent.Greenlet | None = None
        self._redis: redis.Redis | None = None
        self.toxic_watch: ToxicWatch | None = None

    def open(self) -> None:
        if self.path is not None and self.writer is None:
            self.writer = HistoryWriter(self.path, flush_interval=FLUSH_INTERVAL)
        if self.writer is not None and self._flusher is None:
            self._flusher = gevent.spawn(self._flush_forever)
        if self.settings.toxiproxy_url and self.settings.fresh_connections and self.toxic_watch is None:
            self.toxic_watch = ToxicWatch(self.settings.toxiproxy_url)
            self.toxic_watch.start()

    def toxic_hit(self) -> bool | None:
        """Was a toxic active on the app proxy as this request's connection opened?"""
        return None if self.toxic_watch is None else self.toxic_watch.faulted

    def close(self) -> None:
        if self._flusher is not None:
            self._flusher.kill(block=False)
            self._flusher = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self._redis is not None:
            self._redis.close()
            self._redis = None
        if self.toxic_watch is not None:
            self.toxic_watch.stop()
            self.toxic_watch = None

    def new_client(self) -> Client:
        """A fresh Jepsen process for one user (or one concurrent branch of a user)."""
        self.open()
        return Client(self.writer, worker=self.worker, user=next(self._users))

    def rng_for(self, client: Client) -> random.Random:
        # Seeded by user number only, so a single-process run repeats its choices.
        return random.Random(f"{self.settings.seed}:{client.user}")

    def redis(self) -> redis.Redis:
        if self.settings.redis_url is None:
            raise RuntimeError("HARNESS_REDIS_URL is not set: this scenario publishes to the stream")
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
            if self.writer is not None:
                self.writer.flush()


def shared_token(settings: LoadSettings) -> str:
    """The token of the run's shared key pool, the same in every load process of a run.

    Derived from the seed and the run's history directory (every process of a run
    writes there, and each run has its own), so processes agree without talking,
    and a later run on the same stack does not reuse an earlier run's keys.
    """
    source = f"{settings.seed}:{settings.history_dir.resolve() if settings.history_dir else ''}"
    return hashlib.sha256(source.encode()).hexdigest()[:10]


def worker_name() -> str:
    """`w<pid>h<host hash>`: unique per load process, also across compose containers."""
    host = zlib.crc32(socket.gethostname().encode()) & 0xFFFF
    return f"w{os.getpid()}h{host:04x}"


def load_process(environment: Environment) -> LoadProcess:
    process = getattr(environment, _ATTRIBUTE, None)
    if process is None:
        raise RuntimeError("harness.loadgen.recording.install(events) was not called by the locustfile")
    return process


def install(events: Events) -> None:
    """Register the listeners that give each load process its LoadProcess."""

    def on_init(environment: Environment, **_: Any) -> None:
        if isinstance(environment.runner, MasterRunner):
            return
        setattr(environment, _ATTRIBUTE, LoadProcess(environment, LoadSettings.from_env()))

    def on_test_start(environment: Environment, **_: Any) -> None:
        process = getattr(environment, _ATTRIBUTE, None)
        if process is not None:
            process.open()

    def on_stop(environment: Environment, **_: Any) -> None:
        process = getattr(environment, _ATTRIBUTE, None)
        if process is not None:
            process.close()

    events.init.add_listener(on_init)
    events.test_start.add_listener(on_test_start)
    events.test_stop.add_listener(on_stop)
    events.quitting.add_listener(on_stop)
