"""Fixtures of the lifecycle tests.

Each `harness` process a test starts gets a registry of its own (see lifecycle_helpers);
in-process code here gets this package's private registry. `runs` collects the
processes a test starts so that whatever they leave is killed after the test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lifecycle_helpers import HarnessRun

from tests.support.registry import registry_for_session

private_registry = pytest.fixture(registry_for_session, scope="session", autouse=True, name="private_registry")


@pytest.fixture
def runs() -> Iterator[list[HarnessRun]]:
    """The test appends each HarnessRun it starts; teardown SIGKILLs what is left of each."""
    started: list[HarnessRun] = []
    yield started
    for run in started:
        run.kill_everything()
