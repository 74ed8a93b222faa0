"""End-to-end fixtures: one short smoke job shared by the tests that read its runs."""

from __future__ import annotations

import pytest
from e2e_helpers import SmokeRun, harness


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> SmokeRun:
    workdir = tmp_path_factory.mktemp("smoke")
    # The job's own users (SMOKE_USERS), not fewer: the correct flaky-network run
    # reaches its recovery point only when order creations share the app's Redis
    # connections inside the plan's Redis window. With 6 users, in a suite run that
    # left it 277 operations, it was reached 0 times and the job failed inconclusive.
    result = harness("smoke", "--duration", "8s", "--app-workers", "2",
                     "--runs-dir", str(workdir / "runs"), cwd=workdir, timeout=420)
    return SmokeRun(result, workdir / "runs")
