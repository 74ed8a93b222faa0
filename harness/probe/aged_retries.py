"""After the load: keys aged on the service's clock and sent again (`aged_retry`).

A plan's `aged_retries: {within: [50%, 99%], past: [101%]}` (harness.nemesis.plans
`AgedRetries`; the bundled plan `probe-clocks`) checks the key lifetime an endpoint
declares (`key_lifetime: 24h`: the policy the service publishes; without it 24 h is
assumed, and the run says so). For each fraction, in rising order of the offset it
means (fraction × the endpoint's lifetime), the service's clock is jumped forward to
that offset (a `clock` window of faults.jsonl, verified on its Date header like every
clock fault; it only ever moves forward), and every key of the endpoint that already
succeeded is sent again: the same key, body, path and identity (bounded:
MAX_AGED_RETRIES per stage, AGED_BUDGET seconds for all).

- Within the lifetime the requests are kind `aged_retry` in the run's history, so the
  existing invariants judge them: a faithful replay, no second resource, no second
  effect (a store that forgot the key creates a second payment for it).
- Past the lifetime what the service does is reported, not judged: those requests go
  to `aged-past-lifetime.jsonl` (outside the history) and `clocks.json` counts, per
  stage, the answers that replayed the first resource and those that made another.

`clocks.json` holds each endpoint's lifetime (and whether it was assumed) and each
stage: endpoint, fraction, offset, judged or not, requests sent, their statuses.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from harness.history import Client, HistoryWriter, history_path, iter_operations
from harness.nemesis.clock_faults import ClockFault
from harness.nemesis.faults import FaultTargets
from harness.nemesis.plans import AgedRetries
from harness.nemesis.runner import log_fault
from harness.probe.clocks import ProbeClocks
from harness.probe.config import Endpoint, ProbeConfig
from harness.probe.late_retries import OPERATION, send_again
from harness.probe.plan_targets import SERVICE

AGED_RETRY = "aged_retry"
DEFAULT_KEY_LIFETIME = 24 * 3600.0
MAX_AGED_RETRIES = 100  # per stage
AGED_BUDGET = 30.0  # seconds for every stage together
PAST_FILE = "aged-past-lifetime.jsonl"
CLOCKS_FILE = "clocks.json"


@dataclass(frozen=True)
class AgedStage:
    endpoint: str
    fraction: float
    offset: float  # seconds the service's clock was moved forward to
    judged: bool
    sent: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    same_resource: int = 0  # answers naming the first resource of the key
    other_resource: int = 0  # answers naming another one: the key was forgotten


@dataclass(frozen=True)
class AgedReport:
    lifetimes: dict[str, dict[str, Any]]
    stages: list[AgedStage]

    def notes(self) -> list[str]:
        """One line per endpoint whose lifetime was assumed, per stage past it."""
        lines = [f"{name}: no key_lifetime declared; assumed {DEFAULT_KEY_LIFETIME / 3600:g}h"
                 for name, lifetime in self.lifetimes.items() if lifetime["assumed"]]
        lines += [f"{stage.endpoint}: past the key lifetime ({stage.fraction:.0%}): {stage.sent} sent, "
                  f"{stage.same_resource} replayed the first resource, {stage.other_resource} made another "
                  "(reported, not judged)" for stage in self.stages if not stage.judged]
        return lines


def lifetime_of(endpoint: Endpoint) -> tuple[float, bool]:
    """The endpoint's key lifetime in seconds, and whether it was assumed."""
    return (endpoint.key_lifetime, False) if endpoint.key_lifetime is not None else (DEFAULT_KEY_LIFETIME, True)


def aged_retries(config: ProbeConfig, upstream: str, operations: Sequence[Mapping[str, Any]], spec: AgedRetries,
                 clocks: ProbeClocks, run_dir: Path, fault_log: Path) -> AgedReport:
    """Run every stage (module docstring); the report is also written to clocks.json."""
    firsts = _succeeded(operations)
    plan: list[tuple[float, float, bool, Endpoint]] = []
    lifetimes: dict[str, dict[str, Any]] = {}
    for endpoint in config.endpoints:
        lifetime, assumed = lifetime_of(endpoint)
        lifetimes[endpoint.name] = {"seconds": lifetime, "assumed": assumed}
        plan += [(fraction * lifetime, fraction, True, endpoint) for fraction in spec.within]
        plan += [(fraction * lifetime, fraction, False, endpoint) for fraction in spec.past]
    plan.sort(key=lambda stage: (stage[0], stage[3].name))
    targets = FaultTargets(network=_NoNetwork(), processes=_NoNetwork(), clocks=clocks)  # type: ignore[arg-type]
    deadline = time.monotonic() + AGED_BUDGET
    stages: list[AgedStage] = []
    with (HistoryWriter(history_path(run_dir / "history", worker="aged")) as judged_writer,
          HistoryWriter(run_dir / PAST_FILE) as past_writer):
        for offset, fraction, judged, endpoint in plan:
            if time.monotonic() > deadline:
                break
            _move_clock(clocks, targets, offset, f"aged-{round(fraction * 100)}pct-{endpoint.name}", fault_log)
            writer = judged_writer if judged else past_writer
            client = Client(writer, worker="aged" if judged else "aged-past", user=0)
            sent, statuses, same, other = 0, Counter[str](), 0, 0
            for op in firsts.get(endpoint.name, [])[:MAX_AGED_RETRIES]:
                if time.monotonic() > deadline:
                    break
                response = send_again(client, config, upstream, endpoint, op["body"], key=str(op["idempotency_key"]),
                                      identity=op.get("identity"), kind=AGED_RETRY, path=op.get("path"))
                sent += 1
                statuses[str(response.status_code if response is not None else None)] += 1
            writer.flush()
            if not judged:
                same, other = _resources(run_dir / PAST_FILE, firsts.get(endpoint.name, []), fraction)
            stages.append(AgedStage(endpoint=endpoint.name, fraction=fraction, offset=offset, judged=judged,
                                    sent=sent, statuses=dict(statuses), same_resource=same, other_resource=other))
    report = AgedReport(lifetimes=lifetimes, stages=stages)
    (run_dir / CLOCKS_FILE).write_bytes(orjson.dumps({"key_lifetimes": lifetimes,
                                                      "stages": [asdict(stage) for stage in stages]},
                                                     option=orjson.OPT_INDENT_2))
    return report


def _succeeded(operations: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Per endpoint, the first request that succeeded for each (key, identity)."""
    seen: set[tuple[str, str, Any]] = set()
    result: dict[str, list[Mapping[str, Any]]] = {}
    for op in sorted(operations, key=lambda op: float(op.get("invoke_time") or 0.0)):
        if (op.get("op") != OPERATION or op.get("type") != "ok" or op.get("idempotency_key") is None
                or op.get("expect") == "payload_mismatch" or not isinstance(op.get("body"), (dict, list))):
            continue
        ident = (str(op.get("endpoint")), str(op["idempotency_key"]), op.get("identity"))
        if ident not in seen:
            seen.add(ident)
            result.setdefault(ident[0], []).append(op)
    return result


def _resources(path: Path, firsts: Sequence[Mapping[str, Any]], fraction: float) -> tuple[int, int]:
    """Of the past-lifetime answers so far, how many named the key's first resource and
    how many another (the last stage's are the last ones per key)."""
    first = {str(op["idempotency_key"]): op.get("resource_id") for op in firsts}
    last: dict[str, Any] = {}
    for op in iter_operations([path]):
        if op.get("type") == "ok" and str(op.get("idempotency_key")) in first:
            last[str(op["idempotency_key"])] = op.get("resource_id")
    same = sum(1 for key, resource in last.items() if resource == first[key])
    return same, len(last) - same


def _move_clock(clocks: ProbeClocks, targets: FaultTargets, offset: float, window: str, fault_log: Path) -> None:
    """Jump the service's clock forward to `offset` (verified), logged as a clock window."""
    current = clocks.fake_clock(SERVICE).offset()
    fault = ClockFault(process=SERVICE, mode="jump", delta=offset - current)
    started = time.time()
    error: str | None = None
    try:
        fault.apply(targets, window)
    except Exception as failure:  # noqa: BLE001 - logged, then raised as the harness's failure
        error = f"could not apply {window}: {failure}"
        raise
    finally:
        log_fault(fault_log, fault.record(window), start=started, end=time.time(), error=error)


class _NoNetwork:
    """The aged stages move a clock only: no proxy, no process is touched."""

    def __getattr__(self, name: str) -> object:
        raise AttributeError(f"the aged retries touch no {name}")
