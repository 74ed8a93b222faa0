"""Fixtures of the web UI tests: a private registry and one small stack per module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.registry import REGISTRY_ENV
from harness.stack import RunningStack, StackSettings, start_stack


@pytest.fixture(scope="session", autouse=True)
def private_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The tests' stacks go in a registry of their own, never in this checkout's."""
    path = tmp_path_factory.mktemp("registry")
    previous = os.environ.get(REGISTRY_ENV)
    os.environ[REGISTRY_ENV] = str(path)
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(REGISTRY_ENV, None)
        else:
            os.environ[REGISTRY_ENV] = previous


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    """A small stack (2 app workers, 1 consumer) on free loopback ports, stopped after the module."""
    root = tmp_path_factory.mktemp("stack") / ".harness"
    running = start_stack(StackSettings(root=root, app_workers=2, consumers=1, health_timeout=30.0))
    try:
        yield running
    finally:
        running.down()
