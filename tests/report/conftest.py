"""Fixtures: a failing and a passing run directory, built by report_sample."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from report_sample import build_run


@pytest.fixture
def failing_run(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    run_dir = tmp_path / "failing"
    return run_dir, build_run(run_dir, failing=True)


@pytest.fixture
def passing_run(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    run_dir = tmp_path / "passing"
    return run_dir, build_run(run_dir, failing=False)
