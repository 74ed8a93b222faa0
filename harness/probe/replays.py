"""A stored 5xx replayed without a mark: told from a new failure by the service's health.

A service that stores a failure's answer and replays it (a 500 kept for minutes)
often does not mark the replay (no `Idempotent-Replayed`), so from outside the
replayed 5xx looks like the service failing again. It is not, when the service was
demonstrably well at that moment: the retry is a late one (harness.probe.late_retries:
sent after the load, once every fault healed), it came outside every fault window
the run logged, a fresh request (a `first` one, answered 2xx and not marked as a
replay) had succeeded since the failure, and yet it got the same status and the same
body (canonical JSON digest) as the failure. A service that runs the retry again
either succeeds or fails anew; repeating the first failure byte for byte while
healthy is a replay. Only late retries are judged so: during the load a dependency
may fail in ways no fault window records (a real one's hiccups), and a genuine
failure repeats its body too. Judged into `replay_fidelity`.

The same evidence of health shows a stuck key (`check_stuck_keys`, judged into
`in_flight_refused_or_waited`): a late retry (harness.probe.late_retries, sent after
every fault healed) that got no answer at all, while a fresh request sent after the
last fault was answered 2xx: the service works, but not for this key (a lock a failed
request never released).

A clock fault moved back (a jump back, the end of a skew, every flip of a strobe) is
longer than its window: under libfaketime the service's monotonic clock goes back with
its wall clock (docs/clocks.md), so a request asleep or waiting on a timer then is held
back by as much, and its key stays in flight that long with nothing wrong in the
service. `clock_hold` is that many seconds; `fault_windows` ends such a fault that much
later and `held_until` says when the last hold is over (the late retries wait for it,
harness.probe.late_retries, and a late retry sent before it is not judged stuck).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

RECOVERY = 0.3  # seconds after a fault window ends during which the service may still be failing


class _Result(Protocol):
    checked: int

    def violate(self, message: str, **evidence: Any) -> None: ...


def clock_hold(fault: Mapping[str, Any]) -> float:
    """Seconds a clock fault may hold its target's timers back: the largest step back it
    made (0 for a fault that is not a clock's, or only moved it forward)."""
    delta = fault.get("delta")
    if fault.get("kind") != "clock" or not isinstance(delta, (int, float)):
        return 0.0
    if fault.get("clock") == "jump":
        return max(0.0, -float(delta))  # a jump stays: only one back is a step back
    return abs(float(delta))  # a skew or a strobe is set back at its end (and a strobe flips)


def held_until(faults: Sequence[Mapping[str, Any]]) -> float:
    """When the last clock fault's hold is over (epoch seconds; 0.0 with none)."""
    return max((float(fault["end"]) + clock_hold(fault) for fault in faults
                if clock_hold(fault) > 0 and isinstance(fault.get("end"), (int, float))), default=0.0)


def fault_windows(faults: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """(start, end + RECOVERY + its clock hold) of every fault the run applied (a fault
    still on: to infinity)."""
    windows = []
    for fault in faults:
        start = fault.get("start")
        if isinstance(start, (int, float)):
            end = fault.get("end")
            windows.append((float(start), float(end) + RECOVERY + clock_hold(fault)
                            if isinstance(end, (int, float)) else float("inf")))
    return windows


def check_unmarked_replays(operations: Sequence[Mapping[str, Any]], faults: Sequence[Mapping[str, Any]],
                           result: _Result, evidence: Any) -> None:
    windows = fault_windows(faults)
    fresh = sorted(float(op["complete_time"]) for op in operations
                   if op.get("type") == "ok" and op.get("expect") == "first" and not op.get("replayed")
                   and isinstance(op.get("complete_time"), (int, float)))
    groups: dict[tuple[Any, Any, Any], list[Mapping[str, Any]]] = defaultdict(list)
    for op in operations:
        if op.get("idempotency_key") is not None and isinstance(op.get("invoke_time"), (int, float)):
            groups[(op.get("endpoint"), op.get("idempotency_key"), op.get("identity"))].append(op)
    for (endpoint, key, _), ops in groups.items():
        ops = sorted(ops, key=lambda op: float(op["invoke_time"]))
        failures = [op for op in ops if isinstance(op.get("status"), int) and op["status"] >= 500
                    and isinstance(op.get("complete_time"), (int, float))]
        if not failures:
            continue
        first = failures[0]
        for later in ops:
            at = float(later["invoke_time"])
            if later.get("expect") != "late_retry" or at <= float(first["complete_time"]) \
                    or later.get("status") is None:
                continue
            result.checked += 1
            if (later.get("status"), later.get("body_digest")) != (first.get("status"), first.get("body_digest")):
                continue
            if any(start <= at <= end for start, end in windows):
                continue
            # A fresh request succeeded after the failure and before this retry.
            index = bisect.bisect_right(fresh, float(first["complete_time"]))
            if index >= len(fresh) or fresh[index] >= at:
                continue
            result.violate(f"{endpoint}: key {key!r}: the first answer's {first['status']} came again, byte for "
                           f"byte, to the late retry sent after every fault healed and after a fresh "
                           f"request had succeeded: a stored 5xx replayed without a replay mark",
                           key=key, failure=evidence(first), replayed=evidence(later))
            break


def check_stuck_keys(operations: Sequence[Mapping[str, Any]], faults: Sequence[Mapping[str, Any]],
                     result: _Result, evidence: Any) -> None:
    windows = fault_windows(faults)
    healed = max((end for _, end in windows), default=0.0)
    fresh = sorted(float(op["invoke_time"]) for op in operations
                   if op.get("type") == "ok" and op.get("expect") == "first" and not op.get("replayed")
                   and isinstance(op.get("invoke_time"), (int, float)) and float(op["invoke_time"]) > healed)
    if not fresh:
        return
    for op in operations:
        if op.get("expect") != "late_retry" or not isinstance(op.get("invoke_time"), (int, float)):
            continue
        if op.get("type") != "info" or op.get("status") is not None or float(op["invoke_time"]) < fresh[0]:
            continue
        result.checked += 1
        result.violate(f"{op.get('endpoint')}: key {op.get('idempotency_key')!r} is stuck: its late retry, sent "
                       f"after every fault healed, got no answer ({op.get('error')}) while a fresh request was "
                       f"answered", key=op.get("idempotency_key"), operation=evidence(op))
