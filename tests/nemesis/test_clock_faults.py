"""The clock fault (harness.nemesis.clock_faults, fake_clock): a plan's `clock:` windows
checked when read, a real process's clock moved through libfaketime's control file
without a restart, and every change verified on the target or refused.

These tests need Debian's libfaketime (`apt-get install faketime`, done by
./scripts/setup.sh); without it they fail saying so, never skip."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.nemesis.clock_faults import ClockFault
from harness.nemesis.fake_clock import (
    ClockReading,
    ClockUnavailable,
    FakeClock,
    format_offset,
    libfaketime_path,
    started_under,
)
from harness.nemesis.faults import FaultTargets
from harness.nemesis.plans import STACK_TARGETS, PlanError, parse_plan
from harness.nemesis.toxiproxy_client import NemesisError


def require_libfaketime() -> Path:
    try:
        return libfaketime_path()
    except ClockUnavailable as error:
        pytest.fail(str(error))


def _plan(fault: dict[str, object]) -> ClockFault:
    plan = parse_plan({"seed": 1, "windows": [{"at": "1s", "for": "1s", "clock": fault}]}, source="c.yaml")
    result = plan.windows[0].fault
    assert isinstance(result, ClockFault)
    return result


def test_jump_skew_and_strobe_are_read_with_their_signs() -> None:
    jump = _plan({"target": "app", "jump": "2h"})
    assert (jump.mode, jump.delta, jump.process) == ("jump", 7200.0, "app")
    assert _plan({"target": "app", "jump": "-2h"}).delta == -7200.0
    assert _plan({"target": "consumer-2", "skew": "-90s"}).delta == -90.0
    strobe = _plan({"target": "app", "strobe": {"delta": "30s", "every": "1s"}})
    assert (strobe.mode, strobe.delta, strobe.every) == ("strobe", 30.0, 1.0)
    assert strobe.label() == "clock-strobe-app"


@pytest.mark.parametrize("fault, field, words", [
    ({"target": "app"}, "windows[0].clock", "needs exactly one of jump, skew, strobe"),
    ({"target": "app", "jump": "1h", "skew": "1s"}, "windows[0].clock", "needs exactly one of"),
    ({"target": "app", "jump": "0s"}, "windows[0].clock.jump", "must not be 0s"),
    ({"target": "app", "skew": "soon"}, "windows[0].clock.skew", "not a duration"),
    ({"target": "app", "strobe": {"delta": "30s", "every": "10ms"}}, "windows[0].clock.strobe.every",
     "at least 0.2s"),
    ({"target": "toxiproxy", "jump": "1h"}, "windows[0].clock.target", "unknown clock 'toxiproxy'"),
    ({"target": "redis", "jump": "1h"}, "windows[0].clock.target", "links jemalloc"),
])
def test_a_bad_clock_window_is_one_line_naming_the_field(fault: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(PlanError) as caught:
        _plan(fault)
    message = str(caught.value)
    assert message.startswith(f"c.yaml: {field}: ") and words in message and "\n" not in message, message


def test_the_stack_targets_name_its_clocks() -> None:
    assert STACK_TARGETS.knows("clock", "app") and STACK_TARGETS.knows("clock", "consumer-3")
    assert not STACK_TARGETS.knows("clock", "toxiproxy")


def test_offsets_are_spelled_as_libfaketime_reads_them() -> None:
    assert [format_offset(s) for s in (7200, -90, 0.5, 0, -0.0)] == ["+7200", "-90", "+0.5", "+0", "+0"]


@pytest.fixture
def clocked_process(tmp_path: Path) -> Iterator[tuple[FakeClock, subprocess.Popen[str]]]:
    """A Python process on a fake clock that prints its time.time() on each line read."""
    require_libfaketime()
    clock = FakeClock(tmp_path / "p.offset").create()
    script = "import sys, time\nfor _ in sys.stdin:\n    print(time.time(), flush=True)\n"
    process = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env={**clock.environment({}), "PATH": "/usr/bin:/bin"})
    try:
        yield clock, process
    finally:
        process.kill()
        process.wait(5)


def _ask(process: subprocess.Popen[str]) -> float:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("\n")
    process.stdin.flush()
    return float(process.stdout.readline()) - time.time()


def test_a_running_process_sees_its_clock_move_without_a_restart(
        clocked_process: tuple[FakeClock, subprocess.Popen[str]]) -> None:
    clock, process = clocked_process
    assert abs(_ask(process)) < 1.0
    clock.set_offset(7200)
    assert abs(_ask(process) - 7200) < 1.0
    clock.set_offset(-90)
    assert abs(_ask(process) + 90) < 1.0
    assert clock.offset() == -90.0
    assert started_under(process.pid, clock.control_file)
    assert not started_under(process.pid, clock.control_file.with_name("other.offset"))


class _Clocks:
    """ClockFaults over one process that answers its time on stdin (or a fixed lie)."""

    def __init__(self, clock: FakeClock, process: subprocess.Popen[str], *, frozen: bool = False) -> None:
        self.clock, self.process, self.frozen = clock, process, frozen

    def fake_clock(self, target: str) -> FakeClock:
        if target != "p":
            raise NemesisError(f"{target!r} was not started under a fake clock")
        return self.clock

    def read_clock(self, target: str) -> ClockReading:
        real = time.time()
        return ClockReading(clock=real if self.frozen else real + _ask(self.process), real=real, resolution=0.01)


class _NoNetwork:
    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"a clock fault made a network call: {name}")


def test_a_skew_is_verified_on_the_target_and_set_back_at_its_heal(
        clocked_process: tuple[FakeClock, subprocess.Popen[str]]) -> None:
    clock, process = clocked_process
    targets = FaultTargets(network=_NoNetwork(), processes=_NoNetwork(), clocks=_Clocks(clock, process))  # type: ignore[arg-type]
    fault = ClockFault(process="p", mode="skew", delta=-90.0)
    fault.apply(targets, "w0")
    assert abs(_ask(process) + 90) < 1.0
    record = fault.record("w0")
    assert record["offset_after"] == -90.0 and abs((record["observed_offset"] or 0) + 90) < 1.0
    fault.heal(targets, "w0")
    assert abs(_ask(process)) < 1.0


def test_a_clock_that_does_not_move_fails_the_window(
        clocked_process: tuple[FakeClock, subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    """A target whose clock reads the real time after the change (not under the fake
    clock) is an apply error, which the nemesis turns into exit 2."""
    clock, process = clocked_process
    monkeypatch.setattr("harness.nemesis.clock_faults.VERIFY_TIMEOUT", 0.5)
    targets = FaultTargets(network=_NoNetwork(), processes=_NoNetwork(),  # type: ignore[arg-type]
                           clocks=_Clocks(clock, process, frozen=True))
    with pytest.raises(NemesisError, match="did not move to \\+7200s"):
        ClockFault(process="p", mode="jump", delta=7200.0).apply(targets, "w0")
    with pytest.raises(NemesisError, match="'q' was not started under a fake clock"):
        ClockFault(process="q", mode="jump", delta=1.0).apply(targets, "w1")


def test_without_libfaketime_the_message_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    monkeypatch.setenv("HARNESS_LIBFAKETIME", str(tmp_path / "missing.so"))
    with pytest.raises(ClockUnavailable, match="apt-get install faketime"):
        FakeClock(tmp_path / "x.offset").environment({})
