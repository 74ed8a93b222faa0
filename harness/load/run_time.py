"""The load's length, counted from its first user: `--harness-run-time SECONDS`.

Locust's own `--run-time` clock starts before the users do; on a busy machine their
start ate up to 4.4 s of a 6 s load (benchmarks/bench_detection.py). Every locustfile
the harness starts (its scenarios through `harness.load.recording`, the probe's users)
installs this instead, and `LocustProcess` passes the flag: the master (or the single
process) calls `runner.quit` that many seconds after `test_start`, which is what
Locust's own headless run-time end calls. Workers ignore it (their master quits them).

With `HARNESS_LOAD_STOP_FILE` set (`STOP_FILE_ENV`), the load also ends, the same
way, as soon as that file exists: the probe ends its load once a plan's exploration
is over (harness.probe.explore), before the run time it allowed for it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment
from locust.event import Events
from locust.runners import WorkerRunner

from harness.load.settings import RUN_TIME_FLAG, STOP_FILE_ENV

STOP_POLL = 0.2


def _quit_when_present(runner: Any, path: Path) -> None:
    while not path.exists():
        gevent.sleep(STOP_POLL)
    runner.quit()


def install_run_time(events: Events) -> None:
    """Register `--harness-run-time` and the timer that ends the load."""

    def on_parser(parser: Any, **_: Any) -> None:
        parser.add_argument(RUN_TIME_FLAG, type=float, default=None, metavar="SECONDS",
                            help="headless: stop the load this long after it started (test_start), "
                                 "unlike --run-time, whose clock starts before the users")

    def on_test_start(environment: Environment, **_: Any) -> None:
        runner = environment.runner
        run_time = getattr(environment.parsed_options, "harness_run_time", None)
        if run_time is not None and runner is not None and not isinstance(runner, WorkerRunner):
            gevent.spawn_later(float(run_time), runner.quit)
        stop_file = os.environ.get(STOP_FILE_ENV, "").strip()
        if stop_file and runner is not None and not isinstance(runner, WorkerRunner):
            gevent.spawn(_quit_when_present, runner, Path(stop_file))

    events.init_command_line_parser.add_listener(on_parser)  # type: ignore[no-untyped-call]
    events.test_start.add_listener(on_test_start)  # type: ignore[no-untyped-call]
