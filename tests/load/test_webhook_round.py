"""A provider's delayed webhook copies (harness.load.flows.webhook_round), without a
stack, in a subprocess (tests/load/webhook_round_play.py): when a delayed copy goes out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_delayed_copy_due_during_the_next_round_is_sent_at_its_end() -> None:
    """On a busy machine a user makes two rounds in a short load, and the second starts
    right after the first, before the first's delayed copy is due: it must go out at
    the second round's end (it used to wait for a third round that never came, and a
    suite run's three loads sent no `webhook_delayed`)."""
    result = subprocess.run([sys.executable, str(REPO / "tests/load/webhook_round_play.py")], capture_output=True,
                            text=True, timeout=60, cwd=REPO, env={**os.environ, "HARNESS_ROOT": ""})
    assert result.returncode == 0, result.stderr[-2000:]
    first, second = json.loads(result.stdout.strip().splitlines()[-1])
    assert "webhook_delayed" not in first["sent"] and first["delayed_left"] == 1  # not due yet: kept
    assert second["sent"].count("webhook_delayed") == 1 and second["sent"][-1] == "webhook_delayed", second
    assert second["delayed_left"] == 1  # the second round's own copy, not due yet
