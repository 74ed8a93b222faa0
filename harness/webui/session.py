"""A swarm the harness did not start, from its beginning to its verdict.

`harness run` starts Locust itself; a person who runs `locust -f harness/locustfiles/mixed.py`
against `harness up` (or presses Start in the web UI) does not. Judging such a swarm
needs what the runner does around its load, in the same order:

1. before the load, `begin_swarm(stack, ...)`: a new run directory under `runs/`
   (harness.run.rundir) with `histories/` (where the Locust processes write),
   `settings.json` (a `RunSettings`: scenario, promised paths, min_acknowledged,
   the stack) and `baseline.ndjson`, the export of
   the stack's state before the swarm. The stack usually served earlier runs; the
   checker judges only what the swarm created or changed, against that baseline
   (harness.check.run_scope), and never by clocks. The stack remembers its current swarm
   in `ROOT/swarm.json`, so `harness check --stack` finds it.
2. after the load, `finish_swarm(stack, run_dir)`: `harness.run.runner.finish_run`, the
   runner's own heal → drain → quiesce → export → final reads → check → report.

Without step 1 there is no baseline: the whole state of a reused stack would be
judged as the swarm's, so `finish_swarm` refuses a directory without settings.json,
unless `adopt_swarm` wrote one on purpose (`--whole-state`: the stack served
nothing but this swarm).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.catalog import DEFAULT_MIN_ACKNOWLEDGED, SCENARIOS
from harness.errors import HarnessError
from harness.nemesis.plans import load_plan
from harness.run.drain import export_state
from harness.run.rundir import HISTORIES_DIR, RunDir, RunDirError, RunScope, RunSettings
from harness.run.runner import RunOutcome, finish_run, promised_paths, stack_summary
from harness.stack.protocol import Stack

SWARM_POINTER = "swarm.json"  # in the stack's root: the swarm begun last on it


def new_swarm_id(scenario: str) -> str:
    """`<date>-<time>-<pid>-swarm-<scenario>`, unique per process and second (a
    counter suffix is added by `begin_swarm` when two begin in the same second)."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-swarm-{scenario}"


def begin_swarm(stack: Stack, runs_root: Path, scenario: str, *, plan: Path | None = None,
                min_acknowledged: int = DEFAULT_MIN_ACKNOWLEDGED,
                extra: Mapping[str, Any] | None = None) -> Path:
    """Create the swarm's run directory (settings, baseline export, histories/) and make
    it the stack's current swarm; returns the directory."""
    if scenario not in SCENARIOS:
        raise HarnessError(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
    if min_acknowledged < 0:
        raise HarnessError("min_acknowledged must not be negative")
    loaded = load_plan(Path(plan)) if plan is not None else None
    runs_root = Path(runs_root)
    runs_root.mkdir(parents=True, exist_ok=True)
    base = new_swarm_id(scenario)
    run_dir: RunDir | None = None
    for attempt in range(100):  # bounded: ids differ by the second and the pid already
        try:
            run_dir = RunDir.create(runs_root, base if attempt == 0 else f"{base}-{attempt}")
            break
        except RunDirError:
            continue
    if run_dir is None:
        raise HarnessError(f"could not create a new run directory under {runs_root}")
    info = stack.info
    export_state(info.app_direct_url, run_dir.baseline, token=info.internal_token or None)
    # Locust was started by someone else: users and duration are theirs, so absent.
    run_dir.write_settings(RunSettings(
        run_id=run_dir.name, scenario=scenario, mode="swarm", unsafe_disable=info.unsafe_disable,
        promised_paths=tuple(promised_paths(scenario, loaded)), min_acknowledged=min_acknowledged,
        plan=str(plan) if plan is not None else None, stack=stack_summary(info),
        started_at=time.time(), scope=RunScope(run_dir.baseline.name), extra=dict(extra or {})))
    _write_pointer(stack, run_dir.path)
    return run_dir.path


def adopt_swarm(stack: Stack, run_dir: Path, scenario: str, *,
                min_acknowledged: int = DEFAULT_MIN_ACKNOWLEDGED) -> Path:
    """Give a swarm that was never begun (e.g. the `runs/swarm-<time>-<pid>/histories`
    a locustfile records into by default) the settings.json of a run, without a baseline:
    the stack's whole state is judged as the swarm's. Right only on a stack that served
    nothing before the swarm (a fresh `harness up`); returns the run directory."""
    if scenario not in SCENARIOS:
        raise HarnessError(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
    path = Path(run_dir)
    if path.name == HISTORIES_DIR and not RunDir(path).histories.is_dir():
        path = path.parent  # given the histories directory itself
    run = RunDir(path)
    if run.has_settings():
        raise HarnessError(f"{run.path} already has settings.json; judge it without --whole-state")
    if not run.histories.is_dir():
        raise HarnessError(f"{run.path} has no histories/ directory")
    info = stack.info
    run.write_settings(RunSettings(
        run_id=run.name, scenario=scenario, mode="swarm", whole_state=True,
        unsafe_disable=info.unsafe_disable, promised_paths=tuple(promised_paths(scenario, None)),
        min_acknowledged=min_acknowledged, stack=stack_summary(info)))
    return run.path


def finish_swarm(stack: Stack, run_dir: Path, *, drain_timeout: float = 30.0) -> RunOutcome:
    """Heal, drain, quiesce, export, final reads, check and report a swarm's directory."""
    run = RunDir(Path(run_dir))
    try:
        settings = run.read_settings()
    except RunDirError as error:
        raise HarnessError(str(error)) from error
    if settings is None:
        raise HarnessError(
            f"{run.path} has no settings.json: begin the swarm with `harness swarm begin SCENARIO` "
            "before the load, so its baseline is saved (or, on a stack that served nothing before "
            "the swarm, judge its whole state: --whole-state --scenario SCENARIO)")
    began_on = settings.stack.get("started_at")
    if began_on is not None and began_on != stack.info.started_at:
        raise HarnessError(
            f"the swarm in {run.path} began on another stack (started at {began_on}); "
            "its baseline does not describe this one")
    if not run.histories.is_dir():
        raise HarnessError(f"{run.path} has no histories/ directory")
    run.write_settings(replace(settings, finished_at=time.time()))
    return finish_run(stack, run, drain_timeout=drain_timeout)


def current_swarm(stack: Stack) -> Path | None:
    """The run directory of the swarm begun last on this stack, or None."""
    try:
        data = json.loads((Path(stack.root) / SWARM_POINTER).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise HarnessError(f"unreadable {Path(stack.root) / SWARM_POINTER}: {error}") from error
    run_dir = data.get("run_dir") if isinstance(data, dict) else None
    return Path(run_dir) if isinstance(run_dir, str) else None


def _write_pointer(stack: Stack, run_dir: Path) -> None:
    path = Path(stack.root) / SWARM_POINTER
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"run_dir": str(run_dir.resolve())}) + "\n")
    os.replace(tmp, path)
