"""timeout_replay's users on workers that take their spawn up late, as a worker starved
by a busy machine does: run with `--processes` by tests/load/test_recording.py.

A worker's `test_start` runs inside its handling of the master's spawn message, so
holding it back SPAWN_DELAY seconds holds the worker's users back as long (while its
heartbeats go on). A master whose load clock started at its own `test_start` quit a
shorter load before any user ran.
"""

from typing import Any

import gevent
from locust import events, task
from locust.env import Environment
from locust.runners import WorkerRunner

from harness.load import flows
from harness.load.recording import install
from harness.load.user import DuplicatingUser

SPAWN_DELAY = 4.0

install(events)


def _take_spawn_up_late(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        gevent.sleep(SPAWN_DELAY)


events.test_start.add_listener(_take_spawn_up_late)  # type: ignore[no-untyped-call]  # Locust's EventHook is unannotated


class LateUser(DuplicatingUser):
    @task
    def create_and_pay(self) -> None:
        flows.timeout_replay_round(self.actor)
