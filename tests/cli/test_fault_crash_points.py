"""`harness fault crash-point`, `fault list` and `fault clear` with crash points: arming
prints the app's read-back, `list` shows what is armed, `clear` disarms everything, and
bad input is one line and exit 2 before anything is sent.

The commands run in-process against a stand-in stack: the embedded Toxiproxy for its
proxies, and the app's crash-point endpoints served by tests.support.crash_points.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.cli import fault_commands
from harness.cli.main import main
from harness.exit_codes import EXIT_HARNESS
from harness.nemesis.crash_points import CrashPointClient
from harness.nemesis.stack_proxies import StackNemesis
from harness.nemesis.toxiproxy_client import Nemesis
from harness.toxiproxy.server import EmbeddedToxiproxy
from tests.support.crash_points import TOKEN, FakeCrashPoints, serving

POINT = "consumer.after_effect"


class FakeStack:
    """What the fault commands ask of a running stack."""

    def __init__(self, nemesis: StackNemesis) -> None:
        self._nemesis = nemesis

    def nemesis(self, recorder: Any = None) -> StackNemesis:
        return self._nemesis

    def services(self) -> list[dict[str, Any]]:
        return [{"name": "app", "status": "running", "healthy": True}]


@pytest.fixture
def fake() -> FakeCrashPoints:
    return FakeCrashPoints()


@pytest.fixture
def stack(fake: FakeCrashPoints, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakeStack]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOXIPROXY_URL", raising=False)
    with EmbeddedToxiproxy() as toxiproxy, serving(fake) as url:
        nemesis = Nemesis(toxiproxy.url)
        nemesis.ensure_proxy("app", "127.0.0.1:0", "127.0.0.1:9")
        running = FakeStack(StackNemesis(nemesis, crash_points=CrashPointClient(url, TOKEN)))
        monkeypatch.setattr(fault_commands, "open_stack", lambda root: running)
        yield running


def test_crash_point_arms_and_prints_the_read_back(stack: FakeStack, fake: FakeCrashPoints,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fault", "crash-point", POINT, "--action", "crash", "--probability", "0.3", "--count", "5"]) == 0
    assert fake.armed[POINT] == {"action": "crash", "probability": 0.3, "count": 5, "delay_ms": 0}
    out = capsys.readouterr().out
    assert out.strip() == (f"armed crash point {POINT} (message, consumer): crash probability=0.3 count=5, "
                           "0 hit(s) so far")
    assert main(["fault", "crash-point", "api.after_claim", "--action", "delay", "--delay", "250"]) == 0
    assert fake.armed["api.after_claim"]["delay_ms"] == 250
    assert "delay 250ms probability=1" in capsys.readouterr().out


def test_list_shows_armed_crash_points_and_clear_disarms_them(stack: FakeStack, fake: FakeCrashPoints,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fault", "list"]) == 0
    assert "no active faults" in capsys.readouterr().out
    assert main(["fault", "crash-point", POINT, "--action", "error", "--probability", "0.5"]) == 0
    fake.fire(POINT)
    capsys.readouterr()
    assert main(["fault", "list"]) == 0
    out = capsys.readouterr().out
    assert f"crash point {POINT} (message, consumer): error probability=0.5, 1 hit(s) so far" in out
    assert "no active faults" not in out
    assert main(["fault", "list", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["crash_points"] == [{"name": POINT, "layer": "message", "process": "consumer",
                                         "action": "error", "probability": 0.5, "count": None,
                                         "delay_ms": 0, "hits": 1}]
    stack.nemesis().add_toxic("app", "latency", attributes={"latency": 100}, name="slow")
    assert main(["fault", "clear"]) == 0
    assert capsys.readouterr().out.strip() == "removed 1 toxic(s); every proxy enabled; disarmed 1 crash point(s)"
    assert fake.armed == {} and stack.nemesis().list_toxics() == []


def test_clear_that_cannot_disarm_is_an_error(stack: FakeStack, fake: FakeCrashPoints,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fault", "crash-point", POINT, "--action", "crash"]) == 0
    fake.ignore_disarm = True
    assert main(["fault", "clear"]) == EXIT_HARNESS
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"crash point {POINT}" in err[0] and "could not heal" in err[0]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["consumer.nowhere", "--action", "crash"], "unknown crash point 'consumer.nowhere' (crash points: api."),
        ([POINT, "--action", "explode"], "invalid choice: 'explode'"),
        ([POINT], "the following arguments are required: --action"),
        ([POINT, "--action", "crash", "--probability", "0"], "must be in (0, 1]"),
        ([POINT, "--action", "crash", "--probability", "1.5"], "must be in (0, 1]"),
        ([POINT, "--action", "crash", "--probability", "often"], "not a number"),
        ([POINT, "--action", "crash", "--count", "0"], "count must be an integer >= 1"),
        ([POINT, "--action", "crash", "--count", "-2"], "--count"),
        ([POINT, "--action", "delay"], "a delay needs delay_ms > 0"),
        ([POINT, "--action", "crash", "--delay", "100"], "delay_ms goes with the delay action only"),
    ],
)
def test_bad_crash_point_input_is_one_line_and_exit_2(stack: FakeStack, fake: FakeCrashPoints, argv: list[str],
                                                      words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fault", "crash-point", *argv]) == EXIT_HARNESS
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], lines
    assert captured.out == ""
    assert fake.requests == []  # nothing was sent


def test_an_action_the_point_does_not_take_is_refused(stack: FakeStack, fake: FakeCrashPoints,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fault", "crash-point", "consumer.after_read", "--action", "drop-reply"]) == EXIT_HARNESS
    assert "takes crash, error, delay, not drop-reply" in capsys.readouterr().err
    assert fake.armed == {}


def test_crash_point_needs_a_running_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(fault_commands, "open_stack", lambda root: None)
    assert main(["fault", "crash-point", POINT, "--action", "crash"]) == EXIT_HARNESS
    assert "no stack is running" in capsys.readouterr().err
