"""The order of a run's end: a fault that runs to the end of the load is healed only
after the load has stopped (harness.run.runner.drive_load, NemesisRunner's hold)."""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from harness.nemesis.plans import FaultWindow, NemesisRunner, ProxyDownFault, parse_plan, schedule
from harness.report.run_facts import LoadWindow
from harness.run.cleanup import Cleanup
from harness.run.rundir import RunDir
from harness.run.runner import drive_load


class Network:
    """A Toxiproxy stand-in that records when each proxy went down and came back."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, float]] = []

    def add_toxic(self, proxy: str, type: str, *, stream: str = "downstream",  # noqa: A002
                  attributes: dict[str, int] | None = None, toxicity: float = 1.0,
                  name: str | None = None) -> None:
        self.events.append(("add", proxy, time.monotonic()))

    def remove_toxic(self, proxy: str, name: str) -> None:
        self.events.append(("remove", proxy, time.monotonic()))

    def disable_proxy(self, name: str) -> None:
        self.events.append(("disable", name, time.monotonic()))

    def enable_proxy(self, name: str) -> None:
        self.events.append(("enable", name, time.monotonic()))

    def when(self, action: str, proxy: str) -> float:
        (moment,) = [at for what, name, at in self.events if (what, name) == (action, proxy)]
        return moment


class NoProcesses:
    def kill(self, service: str) -> None: raise AssertionError(service)
    def start(self, service: str) -> None: raise AssertionError(service)
    def pause(self, service: str) -> None: raise AssertionError(service)
    def resume(self, service: str) -> None: raise AssertionError(service)
    def restart(self, service: str) -> None: raise AssertionError(service)


class Load:
    """A load process that runs `seconds` after start, like Locust finishing its retries."""

    log_path = Path("locust.log")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.began: float | None = None
        self.exited_at: float | None = None

    @property
    def returncode(self) -> int | None:
        return 0 if self.exited_at is not None else None

    def start(self) -> None:
        self.began = time.monotonic()

    def finished(self, *, timeout: float) -> bool:
        assert self.began is not None
        left = self.began + self.seconds - time.monotonic()
        if left > 0:
            time.sleep(min(left, timeout, 0.02))
            return False
        if self.exited_at is None:
            self.exited_at = time.monotonic()
        return True

    def stop(self) -> None:
        self.finished(timeout=0.0)


def _down_past_the_end(duration: float) -> list[FaultWindow]:
    plan = parse_plan({"seed": 1, "windows": [{"at": "0s", "for": "60s", "proxy_down": "app"}]})
    return schedule(plan, duration)


def test_a_window_cut_at_the_end_of_the_run_stays_on_until_the_load_has_stopped(tmp_path: Path) -> None:
    network, load = Network(), Load(seconds=0.6)
    windows = _down_past_the_end(0.2)
    assert windows[0].end == 0.2  # the schedule cut it at the run's duration
    runner = NemesisRunner(network, NoProcesses(), tmp_path / "faults.jsonl")
    healed: list[float] = []
    window = drive_load(load, runner, windows, duration=0.2, cleanup=Cleanup(None),
                        heal=lambda: healed.append(time.monotonic()))

    assert load.exited_at is not None
    # Down while the load ran to its very end (0.4 s past the duration), up only after it.
    assert network.when("disable", "app") < load.exited_at <= network.when("enable", "app")
    assert healed and healed[0] >= network.when("enable", "app")
    assert isinstance(window, LoadWindow)
    assert window.started is not None and window.stopped is not None and window.healed is not None
    assert window.started <= window.stopped <= window.healed
    (line,) = [orjson.loads(raw) for raw in (tmp_path / "faults.jsonl").read_bytes().splitlines()]
    assert line["end"] - line["start"] >= 0.35 and line["error"] is None


def test_without_the_hold_the_clock_heals_while_the_load_still_runs(tmp_path: Path) -> None:
    # The control: the old order, which the test above would catch.
    network = Network()
    runner = NemesisRunner(network, NoProcesses(), tmp_path / "faults.jsonl")
    began = time.monotonic()
    runner.start(_down_past_the_end(0.2))
    time.sleep(0.6)
    assert network.when("enable", "app") - began < 0.5
    runner.stop()


def test_a_window_that_ends_before_the_load_is_healed_on_time(tmp_path: Path) -> None:
    network = Network()
    windows = [FaultWindow("early", 0.0, 0.1, ProxyDownFault("app")),
               FaultWindow("late", 0.05, 0.25, ProxyDownFault("redis"))]
    runner = NemesisRunner(network, NoProcesses(), tmp_path / "faults.jsonl")
    began = time.monotonic()
    runner.start(windows, hold_from=0.3)
    time.sleep(0.5)
    assert network.when("enable", "app") - began < 0.3  # healed on the clock
    assert runner.active() == ["late"]  # ends at 0.3: runs to the end of the load, held
    runner.stop()
    assert runner.active() == [] and runner.report().ok
    assert network.when("enable", "redis") - began >= 0.5


def test_drive_load_records_the_window_through_the_run_directory(tmp_path: Path) -> None:
    run_dir = RunDir.create(tmp_path, "r1")
    window = LoadWindow(started=10.0, stopped=14.5, healed=14.6)
    run_dir.write_load_window(window)
    assert run_dir.read_load_window() == window
    run_dir.load_window.write_text("[]")
    assert run_dir.read_load_window() is None
