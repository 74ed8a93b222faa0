"""Names shared across modules and processes: one spelling each.

A name belongs here when two places must agree on it and a typo in one would not be
caught by an import: a default directory, an environment variable the harness sets
for a child process, a field another process writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

# Where a local stack keeps its state (state.json, logs) unless `--root` says otherwise.
DEFAULT_STACK_ROOT: Final = Path(".harness")
