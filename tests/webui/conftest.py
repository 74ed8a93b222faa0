"""Fixtures of the web UI tests: a private registry and one small stack per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.stack.local import Stack, start_stack
from tests.support.registry import registry_for_session
from tests.support.stacks import small_settings

# The tests' stacks go in a registry of their own, never in this checkout's.
private_registry = pytest.fixture(registry_for_session, scope="session", autouse=True, name="private_registry")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A small stack (2 app workers, 1 consumer) on free loopback ports, stopped after the module."""
    root = tmp_path_factory.mktemp("stack") / ".harness"
    with start_stack(small_settings(root, health_timeout=30.0)) as running:
        yield running
