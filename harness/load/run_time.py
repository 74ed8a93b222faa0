"""The load's length, counted from its users' start: `--harness-run-time SECONDS`.

Locust's own `--run-time` clock starts before the users do; on a busy machine their
start ate up to 4.4 s of a 6 s load (benchmarks/bench_detection.py). Every locustfile
the harness starts (its scenarios through `harness.load.recording`, the probe's users)
installs this instead, and `LocustProcess` passes the flag. The process that drives the
run calls `runner.quit` (what Locust's own headless run-time end calls) that many
seconds after the users started:

- standalone: from `test_start`, which Locust fires just before it spawns the users;
- a master: from the moment its workers report their users running (every connected
  worker runs users, or the workers run all the users asked for), waiting at most
  `WORKERS_USERS_WAIT` seconds. A master fires `test_start` before it even sends the
  spawn messages, and a worker starved by a busy machine took longer than a 3 s load
  to take its spawn up: the master quit first and the worker's users never ran (no
  history at all). A worker that goes missing or quits is not waited for, and a test
  that stops meanwhile ends the wait.

Workers ignore the flag (their master quits them).

With `HARNESS_LOAD_STOP_FILE` set (`STOP_FILE_ENV`), the load also ends, the same
way, as soon as that file exists: the probe ends its load once a plan's exploration
is over (harness.probe.explore), before the run time it allowed for it.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.event import Events
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING, MasterRunner, Runner, WorkerRunner

from harness.load.settings import RUN_TIME_FLAG, STOP_FILE_ENV

STOP_POLL = 0.2


def _quit_when_present(runner: Any, path: Path) -> None:
    while not path.exists():
        gevent.sleep(STOP_POLL)
    runner.quit()


# How long a master waits for its workers' users before the clock starts anyway.
WORKERS_USERS_WAIT = 30.0
_POLL = 0.1

logger = logging.getLogger(__name__)


def install_run_time(events: Events) -> None:
    """Register `--harness-run-time` and the timer that ends the load."""

    def on_parser(parser: Any, **_: Any) -> None:
        parser.add_argument(RUN_TIME_FLAG, type=float, default=None, metavar="SECONDS",
                            help="headless: stop the load this long after its users started "
                                 "(unlike --run-time, whose clock starts before the users)")

    def on_test_start(environment: Environment, **_: Any) -> None:
        runner = environment.runner
        run_time = getattr(environment.parsed_options, "harness_run_time", None)
        if run_time is not None and runner is not None and not isinstance(runner, WorkerRunner):
            gevent.spawn(_quit_after, runner, float(run_time))
        stop_file = os.environ.get(STOP_FILE_ENV, "").strip()
        if stop_file and runner is not None and not isinstance(runner, WorkerRunner):
            gevent.spawn(_quit_when_present, runner, Path(stop_file))

    events.init_command_line_parser.add_listener(on_parser)  # type: ignore[no-untyped-call]
    events.test_start.add_listener(on_test_start)  # type: ignore[no-untyped-call]


def _quit_after(runner: Runner, seconds: float) -> None:
    if isinstance(runner, MasterRunner):
        _wait_for_workers_users(runner, WORKERS_USERS_WAIT)
    gevent.sleep(seconds)
    runner.quit()


def _wait_for_workers_users(runner: MasterRunner, limit: float) -> None:
    """Until the workers report their users running, the test stops, or `limit` passes."""
    deadline = time.monotonic() + limit
    # The first check runs after test_start's listeners: the state is then spawning.
    while runner.state in (STATE_SPAWNING, STATE_RUNNING) and not _workers_run_users(runner):
        if time.monotonic() >= deadline:
            logger.warning("harness: the workers ran %d of %d users after %.0f s; the load's clock "
                           "starts now", runner.user_count, runner.target_user_count, limit)
            return
        gevent.sleep(_POLL)


def _workers_run_users(runner: MasterRunner) -> bool:
    # A worker's user count is what its last spawning_complete or stats report said.
    if runner.target_user_count and runner.user_count >= runner.target_user_count:
        return True
    workers = [node for node in runner.clients.all if node.state != STATE_MISSING]
    return bool(workers) and all(node.user_count > 0 for node in workers)
