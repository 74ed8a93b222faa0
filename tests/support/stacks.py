"""Small local stacks for the tests that need a real one (stack, web UI).

`small_settings(root, **overrides)` is the stack every such test starts unless it says
otherwise: two app workers and one consumer (the least that still shows concurrency
and the message path), on free loopback ports under `root`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.stack.local import StackSettings


def small_settings(root: Path, **overrides: Any) -> StackSettings:
    """StackSettings of a small stack under `root`; `overrides` replace any field."""
    values: dict[str, Any] = {"root": root, "app_workers": 2, "consumers": 1, "health_timeout": 20.0}
    values.update(overrides)
    return StackSettings(**values)
