"""Clock faults on a local stack (harness.stack.clocks): its app and a consumer
started under libfaketime (StackSettings.fake_clocks), their clocks moved while they
run and verified (the app's Date header, the consumer's process), a restart keeping
the clock, and a service not started on a fake clock refused.

These tests need Debian's libfaketime (`apt-get install faketime`, done by
./scripts/setup.sh); without it they fail saying so, never skip."""

from __future__ import annotations

import time
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from pathlib import Path

import pytest
import requests

from harness.nemesis.clock_faults import ClockFault
from harness.nemesis.fake_clock import ClockUnavailable, libfaketime_path
from harness.nemesis.faults import FaultTargets
from harness.nemesis.toxiproxy_client import NemesisError
from harness.stack.clocks import StackClocks
from harness.stack.info import StackError
from harness.stack.local import Stack, start_stack
from tests.support.registry import registry_for_session
from tests.support.stacks import small_settings

private_registry = pytest.fixture(registry_for_session, scope="module", autouse=True, name="private_registry")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, private_registry: Path) -> Iterator[Stack]:
    try:
        libfaketime_path()
    except ClockUnavailable as error:
        pytest.fail(str(error))
    root = tmp_path_factory.mktemp("clock-stack") / ".harness"
    running = start_stack(small_settings(root, fake_clocks=("app", "consumer-1")))
    try:
        yield running
    finally:
        running.down()


def _targets(stack: Stack) -> FaultTargets:
    return FaultTargets(network=stack.nemesis(), processes=stack, clocks=StackClocks(Path(stack.info.root),
                                                                                        stack.info))


def _app_offset(stack: Stack) -> float:
    answer = requests.get(f"{stack.info.app_direct_url}/healthz", timeout=5)
    return parsedate_to_datetime(answer.headers["Date"]).timestamp() + 0.5 - time.time()


def test_the_apps_clock_jumps_stays_across_a_restart_and_a_skew_is_set_back(stack: Stack) -> None:
    targets = _targets(stack)
    jump = ClockFault(process="app", mode="jump", delta=7200.0)
    jump.apply(targets, "w0")
    assert abs(_app_offset(stack) - 7200) < 2.0
    assert abs((jump.record("w0")["observed_offset"] or 0) - 7200) < 2.0
    stack.restart("app")
    assert abs(_app_offset(stack) - 7200) < 2.0, "a restart lost the fake clock"
    skew = ClockFault(process="app", mode="skew", delta=-90.0)
    skew.apply(targets, "w1")
    assert abs(_app_offset(stack) - 7110) < 2.0
    skew.heal(targets, "w1")
    assert abs(_app_offset(stack) - 7200) < 2.0
    ClockFault(process="app", mode="jump", delta=-7200.0).apply(targets, "w2")
    assert abs(_app_offset(stack)) < 2.0


def test_a_consumers_strobe_is_verified_on_its_process(stack: Stack) -> None:
    targets = _targets(stack)
    strobe = ClockFault(process="consumer-1", mode="strobe", delta=30.0, every=0.2)
    strobe.apply(targets, "w0")
    time.sleep(0.7)
    strobe.heal(targets, "w0")
    record = strobe.record("w0")
    assert record["observed_offset"] == 30.0 and (record["flips"] or 0) >= 2


def test_a_service_not_started_on_a_fake_clock_is_refused(stack: Stack) -> None:
    with pytest.raises(NemesisError, match="consumer-2 .* was not started under the fake clock"):
        ClockFault(process="consumer-2", mode="jump", delta=1.0).apply(_targets(stack), "w0")


def test_fake_clocks_are_for_the_app_and_consumers_only(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="not redis"):
        small_settings(tmp_path, fake_clocks=("redis",))
