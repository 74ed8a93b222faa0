"""Helpers of the probe's tests: where the repository is and how long a probe runs.

The services a probe test runs against are started with the `http_services` fixture
(tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Short probes keep the suite fast; the plan's first windows fall inside them.
PROBE_SECONDS = 3
