"""The in-flight lease under app clock jumps, as `harness run` with the bundled plan
`lease-clock-jumps`: every order creation held after its order script while the app's
clock (libfaketime) jumps an hour forward every half second.

Both runs keep `recovery-nonatomic` on, which writes an order's recovery point after
the hold: the lease is then the only thing between a duplicate of a held creation and
a second order (with the atomic recovery point the `lease-wall-clock` control is
masked: tests/target_app/test_ta_lease.py, docs/clocks.md "Leases"). With the lease a
Redis expiry (the correct lease) the run passes; with `lease-wall-clock` the checker
fails it by one_order_per_key, and by nothing else.

Needs Debian's libfaketime (./scripts/setup.sh); without it the runs exit 2 saying so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_helpers import harness

from harness.exit_codes import EXIT_OK, EXIT_VIOLATION

BASE = "recovery-nonatomic"
CONTROL = "lease-wall-clock"


def run(tmp_path: Path, unsafe_disable: str) -> dict:
    """One short `harness run timeout_replay --plan lease-clock-jumps` on its own stack."""
    tmp_path.mkdir()
    runs = tmp_path / "runs"
    args = ["run", "timeout_replay", "--plan", "lease-clock-jumps", "--unsafe-disable", unsafe_disable,
            "--users", "4", "--duration", "3s", "--app-workers", "2", "--consumers", "1",
            "--runs-dir", str(runs), "--root", str(tmp_path / "stack")]
    result = harness(*args, cwd=tmp_path, timeout=240)
    output = result.stdout[-2000:] + result.stderr[-3000:]
    assert runs.is_dir(), output
    (run_dir,) = [path for path in runs.iterdir() if path.is_dir()]
    faults = [json.loads(line) for line in (run_dir / "faults.jsonl").read_text().splitlines()]
    return {"code": result.code, "result": json.loads((run_dir / "result.json").read_text()),
            "faults": {fault["name"]: fault for fault in faults}, "output": output}


def _held_and_jumped(outcome: dict) -> None:
    faults = outcome["faults"]
    assert (faults["hold-after-create"]["hits"] or 0) > 0, faults
    jumps = sorted(fault["observed_offset"] for name, fault in faults.items() if name.startswith("jump-"))
    assert len(jumps) >= 2 and all(abs(seen - 3600 * n) < 2 for n, seen in enumerate(jumps, 1)), jumps


@pytest.mark.slow
def test_the_lease_on_redis_clock_passes_and_on_the_apps_clock_makes_a_second_order(tmp_path: Path) -> None:
    correct = run(tmp_path / "correct", BASE)
    assert correct["code"] == EXIT_OK, correct["output"]
    assert correct["result"]["verdict"] == "pass"
    assert correct["result"]["paths"]["inflight_refusal"] > 0  # duplicates met a held key
    _held_and_jumped(correct)

    control = run(tmp_path / "control", f"{BASE},{CONTROL}")
    assert control["code"] == EXIT_VIOLATION, control["output"]
    result = control["result"]
    failed = {invariant["name"] for invariant in result["invariants"] if not invariant["passed"]}
    assert result["valid"] is False and failed == {"one_order_per_key"}, (failed, control["output"])
    assert "FAIL: one_order_per_key" in control["output"]
    _held_and_jumped(control)
