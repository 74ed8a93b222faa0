"""End-to-end fixtures: one short smoke job shared by the tests that read its runs."""

from __future__ import annotations

import pytest
from e2e_helpers import SmokeRun, harness


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    workdir = tmp_path_factory.mktemp("smoke")
    result = harness("smoke", "--duration", "8s", "--users", "6", "--app-workers", "2",
                     "--runs-dir", str(workdir / "runs"), cwd=workdir, timeout=420)
    return SmokeRun(result, workdir / "runs")
