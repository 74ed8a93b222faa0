"""Lifecycle tests start `harness` processes, each with a registry of its own (see
lifecycle_helpers); in-process code here gets a private registry too."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.registry import REGISTRY_ENV


@pytest.fixture(scope="session", autouse=True)
def private_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
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
