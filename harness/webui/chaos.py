"""The "Chaos" tab of Locust's web UI: faults by hand while a swarm runs, and a verdict
when it stops.

A locustfile installs it with one line, `harness.webui.install(events)`, placed before
`harness.load.recording.install(events)` (so its `test_start` listener names the
run's history directory before the recording opens its file). It is active only in
the process that serves the web UI: a master or a standalone runner, never a worker,
never a headless run (`harness run` is unaffected).

Locust's supported extension points, and what each carries:

- `web_ui.template_args["extended_tabs"]` / `["extended_tables"]` add the "Chaos" tab
  to Locust's own tab bar, a table whose rows come from `extended_stats` in the
  `/stats/requests` answer (added by an `after_request` hook, as Locust's
  `extend_modern_web_ui.py` example does). That table alone is a live, read-only view
  (run, verdict, active faults) refreshed with Locust's own polling.
- `web_ui.app` routes (a Blueprint under `<web base path>/chaos`, behind Locust's
  `auth_required_if_enabled`): a JSON API (`/chaos/api/...`, errors as
  application/problem+json), the run's reports (`/chaos/runs/<id>/report.html`) and a
  standalone page (`/chaos/`) with every control.
- The controls inside the tab: an `after_request` hook adds one `<script>` to Locust's
  index page; it mounts the same panel as `/chaos/` above the tab's table while the
  tab is open. Should a Locust release change its page, the table and `/chaos/` work.

Safe by default (harness.webui.guard, docs/security.md): with the tab loaded and no
`--web-host`, the web UI listens on 127.0.0.1 only (a warning names the risk of any
other address); every state-changing route wants JSON, this process's token (written
into the tab's own pages, sent by their script as `X-Chaos-Token`) and the web UI's own
Origin, and a refusal is a 403 before anything is done; `--web-login` works with the
harness's locustfiles (basic auth, HARNESS_WEB_PASSWORD) and covers every route.

The run: each test start (the Start button, or any start on the master) gets a new
run directory under `--chaos-runs-dir` (default `runs/`), begun by
`harness.webui.session.begin_swarm` (settings.json, the baseline export, histories/)
before the load begins, and `parsed_options.harness_history_dir` points at its
histories/ (Locust passes it to the workers in the spawn message). Faults applied
from the tab during the run go to its `faults.jsonl`. On test stop (unless
`--chaos-check-on-stop 0`), or on "Check now", a greenlet waits for the histories to
settle, then `finish_swarm` heals every fault, drains, quiesces, exports, reads,
checks and reports; the tab shows the invariants and links report.html.
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import gevent
from flask import Blueprint, Response, jsonify, request, send_from_directory
from locust.env import Environment
from locust.runners import STATE_RUNNING, STATE_SPAWNING, WorkerRunner

from harness import bundled
from harness.catalog import SCENARIOS
from harness.errors import HarnessError
from harness.names import DEFAULT_STACK_ROOT, HISTORY_SUFFIX
from harness.nemesis.crash_points import (
    CRASH_POINT_ACTIONS,
    Arming,
    CrashPointClient,
    CrashPointHit,
    CrashPointInfo,
    check_arming,
)
from harness.nemesis.faults import (
    CrashPointFault,
    Fault,
    FaultRecord,
    FaultTargets,
    ProcessAction,
    ProcessFault,
    ProxyDownFault,
    ToxicFault,
)
from harness.nemesis.plans import load_plan
from harness.nemesis.runner import log_fault
from harness.nemesis.toxiproxy_client import (
    NemesisConflict,
    NemesisError,
    NemesisInvalid,
    NemesisNotFound,
    NemesisUnreachable,
)
from harness.run.rundir import JUNIT_FILE, REPORT_FILE, RESULT_FILE, SETTINGS_FILE, RunDir
from harness.run.runner import heal_everything
from harness.stack.local import Stack, StackError, open_stack
from harness.toxiproxy.toxics import TOXIC_ATTRIBUTES
from harness.webui.guard import (
    ChaosGuard,
    Refused,
    bind_host,
    exposure_warning,
    install_basic_auth,
    is_loopback,
)
from harness.webui.options import TAB_ATTRIBUTE
from harness.webui.session import begin_swarm, finish_swarm

TAB_KEY = "chaos"
ASSETS = Path(__file__).parent / "assets"
REPORT_FILES = (REPORT_FILE, RESULT_FILE, JUNIT_FILE, SETTINGS_FILE)
SNAPSHOT_TTL = 1.0  # the stats table polls every 2 s; the panel every second
SETTLE_POLL = 0.5
SETTLE_LIMIT = 15.0  # the longest wait for late history records after a stop
_RUN_ID = re.compile(r"^[A-Za-z0-9_.+-]{1,200}$")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")

logger = logging.getLogger(__name__)


# --- options ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ChaosOptions:
    stack_root: Path
    runs_root: Path
    plans_dir: Path
    scenario: str
    drain_timeout: float = 30.0
    check_on_stop: bool = True

    @classmethod
    def from_environment(cls, environment: Environment) -> ChaosOptions:
        options = environment.parsed_options
        values: Mapping[str, Any] = vars(options) if options is not None else {}
        scenario = str(values.get("chaos_scenario") or "")
        if not scenario:
            locustfile = str(values.get("locustfile") or environment.locustfile or "")
            stem = Path(locustfile.split(",")[0]).stem
            scenario = stem if stem in SCENARIOS else "mixed"
        return cls(
            stack_root=Path(str(values["harness_root"])) if values.get("harness_root") else DEFAULT_STACK_ROOT,
            runs_root=Path(str(values.get("chaos_runs_dir") or "runs")),
            plans_dir=Path(str(values["chaos_plans_dir"])) if values.get("chaos_plans_dir") else bundled.plans_dir(),
            scenario=scenario,
            drain_timeout=float(values.get("chaos_drain_timeout") or 30.0),
            check_on_stop=bool(int(values.get("chaos_check_on_stop", 1))),
        )


# --- errors as problem+json ------------------------------------------------------------

class Problem(Exception):
    """An HTTP error of the tab's API, answered as application/problem+json (RFC 9457)."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail = status, title, detail

    def response(self) -> Response:
        body = {"type": "about:blank", "title": self.title, "status": self.status, "detail": self.detail,
                # Locust's own start form reads these two when /swarm is refused.
                "success": False, "message": self.detail}
        return Response(json.dumps(body), status=self.status, mimetype="application/problem+json")


# --- the tab ---------------------------------------------------------------------------

class _Active(TypedDict):
    """A fault applied from the tab, until it ends: its faults.jsonl line so far, and
    what completes that line at the end (a crash point's hits), if anything."""

    record: FaultRecord
    start: float
    finish: Callable[[], FaultRecord] | None


@dataclass(frozen=True)
class PlanFault:
    """One distinct fault of a plan, as the tab offers it (`index` addresses it)."""

    index: int
    fault: Fault

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "kind": self.fault.kind, "describe": self.fault.describe()}



class ChaosTab:
    """The state of one Locust master's Chaos tab: its current run, faults and verdict."""

    def __init__(self, environment: Environment, options: ChaosOptions, base_path: str = "",
                 guard: ChaosGuard | None = None) -> None:
        self.environment = environment
        self.options = options
        self.base_path = base_path  # Locust's --web-base-path, without a trailing slash
        self.guard = guard if guard is not None else ChaosGuard(loopback_only=True)
        self._lock = threading.Lock()  # gevent's lock under Locust's monkey patching
        self.run_dir: Path | None = None
        self.prepared: Path | None = None  # begun by the start request, not yet started
        self.run_error: str | None = None
        self.verdict: dict[str, Any] = {"status": "idle"}
        self._active: dict[str, _Active] = {}  # faults applied here, by key
        self._snapshot: tuple[float, dict[str, Any]] | None = None
        self._finisher: gevent.Greenlet | None = None

    # the stack

    def stack(self) -> Stack:
        try:
            stack = open_stack(self.options.stack_root, reclaim=False)
        except StackError as error:
            raise Problem(503, "Stack unreadable", str(error)) from error
        if stack is None:
            raise Problem(503, "No stack", f"no stack is running in {self.options.stack_root}; "
                                           "start one with `harness up` (or pass --harness-root)")
        return stack

    # what the panel and the table show

    def snapshot(self, *, fresh: bool = False) -> dict[str, Any]:
        cached = self._snapshot
        if cached is not None and not fresh and time.monotonic() - cached[0] < SNAPSHOT_TTL:
            return cached[1]
        document: dict[str, Any] = {
            "scenario": self.options.scenario,
            "runner_state": getattr(self.environment.runner, "state", None),
            "run": self._run_document(),
            "verdict": dict(self.verdict),
            "plans": self.plan_names(),
            "toxic_types": {name: list(attrs) for name, attrs in TOXIC_ATTRIBUTES.items()},
            "service_actions": [action.value for action in ProcessAction],
            "crash_point_actions": list(CRASH_POINT_ACTIONS),
            "stack": None, "proxies": [], "services": [], "crash_points": [], "faults": [], "error": None,
            "crash_points_error": None,
        }
        try:
            stack = self.stack()
            info = stack.info
            document["stack"] = {"root": info.root, "mode": info.mode, "app_url": info.app_url,
                                 "toxiproxy_url": info.toxiproxy_url, "unsafe_disable": list(info.unsafe_disable)}
            nemesis = stack.nemesis()
            toxics = nemesis.list_toxics()
            for name, proxy in sorted(nemesis.proxies().items()):
                document["proxies"].append({
                    "name": name, "enabled": proxy.enabled, "listen": proxy.listen, "upstream": proxy.upstream,
                    "toxics": [{"name": t.name, "type": t.type, "stream": t.stream, "toxicity": t.toxicity,
                                "attributes": dict(t.attributes)} for t in toxics if t.proxy == name]})
            document["services"] = [{"name": row["name"], "status": row["status"], "healthy": row["healthy"]}
                                    for row in stack.services()]
            document["crash_points"], document["crash_points_error"] = _crash_point_rows(nemesis.crash_points)
            document["faults"] = _active_faults(document["proxies"], document["services"],
                                                document["crash_points"])
        except (Problem, HarnessError) as error:
            document["error"] = getattr(error, "detail", None) or str(error)
        self._snapshot = (time.monotonic(), document)
        return document

    def _run_document(self) -> dict[str, Any] | None:
        run_dir = self.run_dir or self.prepared
        if run_dir is None:
            return None if self.run_error is None else {"error": self.run_error}
        return {"id": run_dir.name, "dir": str(run_dir), "error": self.run_error,
                "faults_logged": len(self._active)}

    def table_rows(self) -> list[dict[str, str]]:
        """Rows of the tab's table (Locust's extended_stats): run, verdict, active faults."""
        document = self.snapshot()
        rows = []
        run = document["run"] or {}
        verdict = document["verdict"]
        rows.append({"what": "run", "target": str(run.get("id") or "-"),
                     "detail": str(run.get("error") or run.get("dir") or "starts with the next test")})
        rows.append({"what": "verdict", "target": str(verdict.get("verdict") or verdict["status"]).upper(),
                     "detail": str(verdict.get("summary") or verdict.get("message") or "")})
        if document["error"]:
            rows.append({"what": "stack", "target": "unavailable", "detail": str(document["error"])})
        for fault in document["faults"]:
            rows.append({"what": fault["kind"], "target": fault["target"], "detail": fault["detail"]})
        return rows

    def plan_names(self) -> list[str]:
        return bundled.bundled_plan_names(self.options.plans_dir)

    def plan_faults(self, name: str) -> list[PlanFault]:
        """The distinct faults a plan can apply (its windows' and its random nemesis's)."""
        if name not in self.plan_names():
            raise Problem(404, "No such plan", f"no plan {name!r} in {self.options.plans_dir}")
        try:
            plan = load_plan(self.options.plans_dir / f"{name}.yaml")
        except HarnessError as error:
            raise Problem(422, "Unusable plan", str(error)) from error
        faults: list[Fault] = [window.fault for window in plan.windows]
        if plan.random is not None:
            faults.extend(plan.random.faults)
        unique = list({repr(fault): fault for fault in faults}.values())  # attributes are dicts: no hash
        return [PlanFault(index, fault) for index, fault in enumerate(unique)]

    # actions (each invalidates the cached snapshot)

    @property
    def checking(self) -> bool:
        return self._finisher is not None and not self._finisher.dead

    def _not_while_checking(self) -> None:
        # The check heals, drains and reads the state with the consumers paused: a fault
        # (or a resume) in the middle would change what it reads.
        if self.checking:
            raise Problem(409, "Check in progress", "the run is being checked; wait for its verdict")

    def add_toxic(self, proxy: str, toxic_type: str, *, stream: str = "downstream",
                  attributes: Mapping[str, Any] | None = None, toxicity: float = 1.0,
                  name: str | None = None) -> dict[str, Any]:
        self._not_while_checking()
        _check_name(proxy, "proxy")
        if name:
            _check_name(name, "toxic name")
        checked_attributes = {}
        for key, value in (attributes or {}).items():
            try:
                checked_attributes[str(key)] = int(value)
            except (TypeError, ValueError):
                raise Problem(400, "Bad attribute", f"{key} must be an integer, not {value!r}") from None
        try:
            info = self.stack().nemesis().add_toxic(proxy, toxic_type, stream=stream, attributes=checked_attributes,
                                                    toxicity=float(toxicity), name=name or None)
        except NemesisError as error:
            raise _nemesis_problem(error) from error
        applied = ToxicFault(proxy, info.type, info.stream, dict(info.attributes), info.toxicity)
        self._began(f"toxic:{proxy}:{info.name}", applied.record(info.name))
        return {"proxy": proxy, "name": info.name, "type": info.type, "stream": info.stream,
                "toxicity": info.toxicity, "attributes": dict(info.attributes)}

    def remove_toxic(self, proxy: str, name: str) -> None:
        self._not_while_checking()
        _check_name(proxy, "proxy")
        _check_name(name, "toxic name")
        try:
            self.stack().nemesis().remove_toxic(proxy, name)
        except NemesisError as error:
            raise _nemesis_problem(error) from error
        self._ended(f"toxic:{proxy}:{name}")

    def set_proxy(self, proxy: str, enabled: bool) -> None:
        self._not_while_checking()
        _check_name(proxy, "proxy")
        nemesis = self.stack().nemesis()
        try:
            if enabled:
                nemesis.enable_proxy(proxy)
            else:
                nemesis.disable_proxy(proxy)
        except NemesisError as error:
            raise _nemesis_problem(error) from error
        key = f"proxy_down:{proxy}"
        if enabled:
            self._ended(key)
        else:
            self._began(key, ProxyDownFault(proxy).record(f"{proxy}-down"))

    def service_action(self, service: str, action: str) -> None:
        self._not_while_checking()
        _check_name(service, "service")
        try:
            act = ProcessAction(action)
        except ValueError:
            raise Problem(400, "Unknown action",
                          f"action must be one of {', '.join(ProcessAction)}") from None
        stack = self.stack()
        try:
            act.perform(stack, service)
        except StackError as error:
            raise Problem(409, "Process fault failed", str(error)) from error
        if not act.is_fault:  # start, resume: the end of a kill or a pause
            self._ended(f"process:{service}")
            return
        record = ProcessFault(act, service).record(f"{act}-{service}")
        if act.heal_action is not None:
            self._began(f"process:{service}", record)
        else:  # a restart heals itself: a window of no length marks when it happened
            self._began(f"restart:{service}", record)
            self._ended(f"restart:{service}")

    def apply_plan_fault(self, plan: str, index: int) -> dict[str, Any]:
        """Apply one fault of a plan through the tab's own actions (so it is logged like
        one applied by hand); a toxic is named `plan_<plan>_<index>`."""
        faults = self.plan_faults(plan)
        if not 0 <= index < len(faults):
            raise Problem(404, "No such fault", f"plan {plan} has faults 0..{len(faults) - 1}")
        fault = faults[index].fault
        fault.apply(FaultTargets(network=_TabFaults(self), processes=_TabFaults(self),
                                 crash_points=_TabCrashPoints(self)),
                    re.sub(r"[^A-Za-z0-9_-]", "_", f"{plan}-{index}"))
        return {"applied": fault.describe()}

    # crash points (harness.nemesis.crash_points: each change read back from the app)

    def _crash_points(self) -> CrashPointClient:
        client = self.stack().nemesis().crash_points
        if client is None:
            raise Problem(409, "No crash points", "this stack's app has no crash points to arm")
        return client

    def arm_crash_point(self, name: str, arming: Arming) -> dict[str, Any]:
        """Arm one of the app's crash points; logged until it is disarmed (its line
        then counts the hits of its window, as the nemesis's do)."""
        self._not_while_checking()
        _check_name(name, "crash point")
        client = self._crash_points()
        fault, window = CrashPointFault(name, arming), f"{name.replace('.', '-')}-{arming.action}"
        targets = FaultTargets(network=_TabFaults(self), processes=_TabFaults(self), crash_points=client)
        start = time.time()  # before the arming: a hit may come before apply returns
        try:
            fault.apply(targets, window)
        except NemesisError as error:
            raise _nemesis_problem(error) from error

        def finish() -> FaultRecord:
            fault.heal(targets, window)  # disarmed already: reads the window's hits back
            return fault.record(window)

        self._began(f"crash_point:{name}", fault.record(window), finish, start=start)
        return _crash_point_row(client.point(name))

    def disarm_crash_point(self, name: str) -> dict[str, Any]:
        self._not_while_checking()
        _check_name(name, "crash point")
        client = self._crash_points()
        try:
            point = client.disarm(name)
        except NemesisError as error:
            raise _nemesis_problem(error) from error
        self._ended(f"crash_point:{name}")
        return _crash_point_row(point)

    def disarm_crash_points(self) -> dict[str, Any]:
        self._not_while_checking()
        try:
            disarmed = self._crash_points().disarm_all()
        except NemesisError as error:
            raise _nemesis_problem(error) from error
        for key in [key for key in list(self._active) if key.startswith("crash_point:")]:
            self._ended(key)
        return {"disarmed": disarmed}

    def heal(self) -> None:
        self._not_while_checking()
        stack = self.stack()
        try:
            heal_everything(stack.nemesis(), stack)
        except HarnessError as error:
            raise Problem(502, "Heal failed", str(error)) from error
        self._end_all()

    # the fault log of the current run (faults.jsonl, as NemesisRunner writes it)

    def _began(self, key: str, record: FaultRecord, finish: Callable[[], FaultRecord] | None = None,
               start: float | None = None) -> None:
        with self._lock:
            self._active[key] = _Active(record=record, start=time.time() if start is None else start, finish=finish)
            self._snapshot = None

    def _ended(self, key: str, error: str | None = None) -> None:
        with self._lock:
            record = self._active.pop(key, None)
            self._snapshot = None
            run_dir = self.run_dir
        if record is not None and run_dir is not None:
            line = record["record"]
            if record["finish"] is not None:
                try:
                    line = record["finish"]()
                except HarnessError as failure:  # the fault ended; only its count is missing
                    error = error or str(failure)
            # After the finish: a crash point's window ends once it reads back disarmed,
            # and every hit it counts (even one landing during the disarm) lies inside.
            log_fault(RunDir(run_dir).faults, line, start=record["start"], end=time.time(), error=error)

    def _end_all(self) -> None:
        for key in list(self._active):
            self._ended(key)

    # the run's lifecycle

    def prepare_run(self) -> None:
        """A new run directory with its baseline, before the test starts; raises Problem
        while the previous run is still being checked (its consumers are paused)."""
        if self.checking:
            raise Problem(409, "Check in progress", "the previous run is still being checked; "
                                                    "start again when the Chaos tab shows its verdict")
        runner = self.environment.runner
        if runner is not None and runner.state in (STATE_RUNNING, STATE_SPAWNING):
            return  # a change of user count, not a new test
        self.run_error = None
        try:
            self.prepared = begin_swarm(self.stack(), self.options.runs_root, self.options.scenario)
        except Problem as problem:
            self.prepared, self.run_error = None, problem.detail
        except HarnessError as error:
            self.prepared, self.run_error = None, f"could not begin the run: {error}"
        self._snapshot = None

    def on_test_start(self) -> None:
        if self.prepared is None and self.run_error is None:
            self.prepare_run()  # started without the web form (e.g. --autostart)
        self.run_dir, self.prepared = self.prepared, None
        if self.run_dir is not None:
            # Faults applied before the start stay on; in this run they begin now.
            with self._lock:
                for key, record in list(self._active.items()):
                    self._active[key] = {**record, "start": time.time()}
            histories = str(RunDir(self.run_dir).histories.resolve())
            options = self.environment.parsed_options
            if options is not None:
                # harness.load.recording resolves its settings from here at test_start
                # (this listener runs first), and Locust sends it to the workers.
                options.harness_history_dir = histories
            self.verdict = {"status": "recording", "run_id": self.run_dir.name}
        else:
            self.verdict = {"status": "error", "message": self.run_error or "no run directory"}
        self._snapshot = None

    def on_test_stop(self) -> None:
        if self.options.check_on_stop and self.run_dir is not None:
            try:
                self.check_now()
            except Problem as problem:
                self.verdict = {"status": "error", "run_id": self.run_dir.name, "message": problem.detail}

    def check_now(self) -> None:
        """Judge the current run in a greenlet (the API answers at once)."""
        if self.run_dir is None:
            raise Problem(409, "No run", "no run to check: start a test first")
        runner = self.environment.runner
        if runner is not None and runner.state in (STATE_RUNNING, STATE_SPAWNING):
            raise Problem(409, "Test running", "stop the test first: a check heals every fault and "
                                               "pauses the consumers")
        if self.checking:
            return
        self.verdict = {"status": "checking", "run_id": self.run_dir.name,
                        "message": "settling histories, healing, draining, exporting, checking"}
        self._snapshot = None
        self._finisher = gevent.spawn(self._finish, self.run_dir)

    def _finish(self, run_dir: Path) -> None:
        try:
            _settle(RunDir(run_dir).histories)
            self._end_all()
            outcome = finish_swarm(self.stack(), run_dir, drain_timeout=self.options.drain_timeout)
        except Problem as problem:
            self.verdict = {"status": "error", "run_id": run_dir.name, "message": problem.detail}
        except Exception as error:  # noqa: BLE001 - a harness failure is shown, never swallowed silently
            self.verdict = {"status": "error", "run_id": run_dir.name, "message": f"{type(error).__name__}: {error}"}
        else:
            check = outcome.check
            self.verdict = {
                "status": "done", "run_id": run_dir.name, "verdict": check.verdict,
                "exit_code": outcome.exit_code, "summary": outcome.summary,
                "invariants": [{"name": invariant.name, "passed": invariant.passed,
                                "violations": len(invariant.violations)}
                               for invariant in check.invariants],
                "inconclusive_reasons": list(check.inconclusive_reasons),
                "counts": dict(check.counts),
                "report_url": f"{self.base_path}/chaos/runs/{run_dir.name}/{REPORT_FILE}",
            }
        self._snapshot = None

    def run_file(self, run_id: str, name: str) -> Path:
        if not _RUN_ID.match(run_id) or name not in REPORT_FILES:
            raise Problem(404, "Not found", f"no {name} for run {run_id}")
        directory = (self.options.runs_root / run_id).resolve()
        if directory.parent != self.options.runs_root.resolve() or not (directory / name).is_file():
            raise Problem(404, "Not found", f"no {name} for run {run_id}")
        return directory / name


# --- helpers ----------------------------------------------------------------------------

class _TabFaults:
    """The tab's own actions as a fault's targets (harness.nemesis.faults.FaultTargets):
    a plan's fault applied from the tab is checked and logged like one applied by hand."""

    def __init__(self, tab: ChaosTab) -> None:
        self.tab = tab

    def add_toxic(self, proxy: str, type: str, *, stream: str = "downstream",  # noqa: A002 - the API's word
                  attributes: dict[str, int] | None = None, toxicity: float = 1.0,
                  name: str | None = None) -> object:
        return self.tab.add_toxic(proxy, type, stream=stream, attributes=attributes, toxicity=toxicity, name=name)

    def remove_toxic(self, proxy: str, name: str) -> None:
        self.tab.remove_toxic(proxy, name)

    def disable_proxy(self, name: str) -> None:
        self.tab.set_proxy(name, False)

    def enable_proxy(self, name: str) -> None:
        self.tab.set_proxy(name, True)

    def kill(self, service: str) -> None:
        self.tab.service_action(service, ProcessAction.KILL)

    def start(self, service: str) -> None:
        self.tab.service_action(service, ProcessAction.START)

    def pause(self, service: str) -> None:
        self.tab.service_action(service, ProcessAction.PAUSE)

    def resume(self, service: str) -> None:
        self.tab.service_action(service, ProcessAction.RESUME)

    def restart(self, service: str) -> None:
        self.tab.service_action(service, ProcessAction.RESTART)


class _TabCrashPoints:
    """The tab's crash-point actions as a fault's targets (FaultTargets.crash_points):
    a plan's crash point applied from the tab is logged like one armed by hand."""

    def __init__(self, tab: ChaosTab) -> None:
        self.tab = tab

    def point(self, name: str) -> CrashPointInfo:
        return self.tab._crash_points().point(name)

    def arm(self, name: str, arming: Arming) -> CrashPointInfo:
        self.tab.arm_crash_point(name, arming)
        return self.point(name)

    def disarm(self, name: str) -> CrashPointInfo:
        self.tab.disarm_crash_point(name)
        return self.point(name)

    def hits(self) -> list[CrashPointHit]:
        return self.tab._crash_points().hits()


def _crash_point_row(point: CrashPointInfo) -> dict[str, Any]:
    armed = point.armed
    return {"name": point.name, "layer": point.layer, "process": point.process,
            "description": point.description, "actions": list(point.actions), "hits": point.hits,
            "armed": armed.to_json() if armed is not None else None,
            "armed_describe": armed.describe() if armed is not None else None}


def _crash_point_rows(client: CrashPointClient | None) -> tuple[list[dict[str, Any]], str | None]:
    """Every crash point of the app with its arming, or why there is no list (the app may
    be down on purpose: the rest of the state still holds)."""
    if client is None:
        return [], None
    try:
        return [_crash_point_row(point) for _, point in sorted(client.points().items())], None
    except NemesisNotFound:
        return [], None  # an app without crash points
    except NemesisError as error:
        return [], str(error)


def _check_name(value: str, what: str) -> None:
    if not isinstance(value, str) or not _NAME.match(value):
        raise Problem(400, f"Bad {what}", f"{what} must be letters, digits, '.', '_' or '-', not {value!r}")


def _nemesis_problem(error: NemesisError) -> Problem:
    status = {NemesisNotFound: 404, NemesisConflict: 409, NemesisInvalid: 400,
              NemesisUnreachable: 503}.get(type(error), 502)
    return Problem(status, "Toxiproxy refused" if status < 500 else "Toxiproxy failed", str(error))


def _active_faults(proxies: list[dict[str, Any]], services: list[dict[str, Any]],
                   crash_points: Sequence[dict[str, Any]] = ()) -> list[dict[str, str]]:
    faults = []
    for proxy in proxies:
        if not proxy["enabled"]:
            faults.append({"kind": "proxy_down", "target": proxy["name"], "detail": "disabled"})
        for toxic in proxy["toxics"]:
            attributes = " ".join(f"{key}={value}" for key, value in toxic["attributes"].items())
            faults.append({"kind": "toxic", "target": proxy["name"],
                           "detail": f"{toxic['name']}: {toxic['type']} {toxic['stream']} {attributes} "
                                     f"toxicity={toxic['toxicity']:g}"})
    for service in services:
        if service["status"] not in ("running", "external"):
            faults.append({"kind": "process", "target": service["name"], "detail": str(service["status"])})
    for point in crash_points:
        if point["armed"] is not None:
            faults.append({"kind": "crash_point", "target": point["name"],
                           "detail": f"{point['armed_describe']} hits={point['hits']}"})
    return faults


def _settle(histories: Path) -> None:
    """Wait (bounded) until the history files stop growing: the last records of the
    processes (or of the workers, through the master) land after the stop."""
    deadline = time.monotonic() + SETTLE_LIMIT
    previous = None
    while time.monotonic() < deadline:
        sizes = tuple(sorted((path.name, path.stat().st_size) for path in histories.glob(f"*{HISTORY_SUFFIX}")))
        if sizes == previous:  # no file at all twice in a row: nothing was recorded
            return
        previous = sizes
        gevent.sleep(SETTLE_POLL)


# --- Flask ------------------------------------------------------------------------------

def _api(handler: Callable[..., Any], guard: ChaosGuard) -> Callable[..., Response]:
    """Answers JSON; a Problem (or a harness failure) as application/problem+json. The
    guard's checks come first: a refused request (403) reaches no handler."""

    def view(*args: Any, **kwargs: Any) -> Response:
        try:
            guard.check(request)
            result = handler(*args, **kwargs)
        except Refused as refused:
            return Problem(403, refused.title, refused.detail).response()
        except Problem as problem:
            return problem.response()
        except HarnessError as error:
            return Problem(502, "Harness failure", str(error)).response()
        except Exception as error:  # noqa: BLE001 - a bug answers problem+json too, and is logged
            logger.exception("harness chaos tab: %s %s failed", request.method, request.path)
            return Problem(500, "Internal error", f"{type(error).__name__}: {error}").response()
        if isinstance(result, Response):
            return result
        return jsonify(result if result is not None else {"ok": True})

    view.__name__ = handler.__name__
    return view


def _body() -> dict[str, Any]:
    data = request.get_json(silent=True)  # JSON only: the guard refused anything else
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise Problem(400, "Bad body", "the request body must be a JSON object")
    return data


def blueprint(tab: ChaosTab, auth: Callable[[Callable[..., Any]], Callable[..., Any]],
              url_prefix: str) -> Blueprint:
    """Every route of the tab, under `<web base path>/chaos`."""
    bp = Blueprint("harness_chaos", __name__, url_prefix=url_prefix)

    def route(rule: str, methods: tuple[str, ...] = ("GET",)) -> Callable[[Callable[..., Any]], Any]:
        def register(handler: Callable[..., Any]) -> Any:
            bp.add_url_rule(rule, handler.__name__, auth(_api(handler, tab.guard)), methods=list(methods))
            return handler
        return register

    @route("/api/state")
    def state() -> Any:
        return tab.snapshot(fresh=request.args.get("fresh") == "1")

    @route("/api/toxics", ("POST",))
    def add_toxic() -> Any:
        data = _body()
        attributes = data.get("attributes") or {}
        if isinstance(attributes, str):
            attributes = _parse_attributes(attributes)
        if not isinstance(attributes, dict):
            raise Problem(400, "Bad attributes", "attributes must be an object or 'name=value ...'")
        try:
            toxicity = float(data.get("toxicity", 1.0) or 1.0)
        except (TypeError, ValueError):
            raise Problem(400, "Bad toxicity", f"toxicity must be a number, not {data.get('toxicity')!r}") from None
        return tab.add_toxic(str(data.get("proxy", "")), str(data.get("type", "")),
                             stream=str(data.get("stream") or "downstream"), attributes=attributes,
                             toxicity=toxicity, name=str(data.get("name") or "") or None)

    @route("/api/toxics/<proxy>/<name>", ("DELETE",))
    def remove_toxic(proxy: str, name: str) -> Any:
        tab.remove_toxic(proxy, name)

    @route("/api/proxies/<proxy>/<action>", ("POST",))
    def proxy_action(proxy: str, action: str) -> Any:
        if action not in ("enable", "disable"):
            raise Problem(404, "Unknown action", "a proxy is enabled or disabled")
        tab.set_proxy(proxy, action == "enable")

    @route("/api/services/<service>/<action>", ("POST",))
    def service_action(service: str, action: str) -> Any:
        tab.service_action(service, action)

    @route("/api/plans/<plan>")
    def plan_faults(plan: str) -> Any:
        return [fault.to_json() for fault in tab.plan_faults(plan)]

    @route("/api/plans/<plan>/faults/<int:index>", ("POST",))
    def apply_plan_fault(plan: str, index: int) -> Any:
        return tab.apply_plan_fault(plan, index)

    @route("/api/plans/<plan>/toxics", ("POST",))
    def apply_plan_toxics(plan: str) -> Any:
        applied = [tab.apply_plan_fault(plan, fault.index) for fault in tab.plan_faults(plan)
                   if fault.fault.kind == ToxicFault.kind]
        return {"applied": applied}

    @route("/api/crash-points/<name>", ("POST",))
    def arm_crash_point(name: str) -> Any:
        data = _body()
        try:
            arming = check_arming(data.get("action"), data.get("probability", 1.0), data.get("count"),
                                  data.get("delay_ms"))
        except NemesisError as error:
            raise Problem(400, "Bad arming", str(error)) from error
        return tab.arm_crash_point(name, arming)

    @route("/api/crash-points/<name>", ("DELETE",))
    def disarm_crash_point(name: str) -> Any:
        return tab.disarm_crash_point(name)

    @route("/api/crash-points", ("DELETE",))
    def disarm_crash_points() -> Any:
        return tab.disarm_crash_points()

    @route("/api/heal", ("POST",))
    def heal() -> Any:
        tab.heal()

    @route("/api/check", ("POST",))
    def check() -> Any:
        tab.check_now()
        return Response(json.dumps(tab.verdict), status=202, mimetype="application/json")

    @route("/runs/<run_id>/<name>")
    def run_file(run_id: str, name: str) -> Any:
        path = tab.run_file(run_id, name)
        return send_from_directory(path.parent, path.name)

    @route("/assets/<name>")
    def asset(name: str) -> Any:
        if name not in ("chaos.js", "chaos.css"):
            raise Problem(404, "Not found", f"no asset {name}")
        return send_from_directory(ASSETS, name, max_age=0)

    @route("/")
    def page() -> Any:
        text = (ASSETS / "chaos.html").read_text(encoding="utf-8")
        text = text.replace('data-harness-chaos="page"', f'data-harness-chaos="page" {_token_attribute(tab)}', 1)
        return Response(text, mimetype="text/html", headers={"Cache-Control": "no-store"})

    @bp.after_request
    def own_origin_only(response: Response) -> Response:
        return _same_origin(response)

    return bp


def _token_attribute(tab: ChaosTab) -> str:
    """The attribute that hands the page's script the token (chaos.js reads it)."""
    return f'data-chaos-token="{html.escape(tab.guard.token)}"'


def _same_origin(response: Response) -> Response:
    # Locust's web UI allows every origin to read every answer (flask_cors, "*"), which
    # would let any page read the token out of the tab's pages; naming our own origin
    # first makes flask_cors leave the answer alone, and a browser then shows it (and
    # answers a preflight) for this origin only.
    response.headers["Access-Control-Allow-Origin"] = f"{request.scheme}://{request.host}"
    response.vary.add("Origin")
    return response


def _parse_attributes(text: str) -> dict[str, int]:
    attributes = {}
    for item in text.replace(",", " ").split():
        key, sep, value = item.partition("=")
        if not sep:
            raise Problem(400, "Bad attributes", f"attributes are name=value pairs, not {item!r}")
        try:
            attributes[key] = int(value)
        except ValueError:
            raise Problem(400, "Bad attributes", f"{key} must be an integer, not {value!r}") from None
    return attributes


def attach(environment: Environment) -> ChaosTab | None:
    """Build the tab on a master or standalone runner with a web UI; None elsewhere."""
    web_ui = environment.web_ui
    if web_ui is None or isinstance(environment.runner, WorkerRunner) or web_ui.app is None:
        return None
    options = environment.parsed_options
    base = str(getattr(options, "web_base_path", "") or "").rstrip("/")
    web_host = str(getattr(options, "web_host", "") or "")
    # No --web-host: loopback only. Locust binds at web_ui.start(), after the init event.
    loopback = bind_host(web_host)
    if loopback is not None:
        web_ui.host = loopback
        logger.info("Chaos tab: the web UI listens on %s only (pass --web-host to choose; docs/security.md)",
                    loopback)
    warning = exposure_warning(web_ui.host, int(getattr(options, "web_port", 0) or web_ui.port),
                               bool(web_ui.web_login))
    if warning:
        logger.warning(warning)
    install_basic_auth(web_ui, os.environ)
    guard = ChaosGuard(loopback_only=is_loopback(web_ui.host))
    tab = ChaosTab(environment, ChaosOptions.from_environment(environment), base, guard)
    setattr(environment, TAB_ATTRIBUTE, tab)
    web_ui.app.register_blueprint(blueprint(tab, web_ui.auth_required_if_enabled, f"{base}/chaos"))
    web_ui.template_args["extended_tabs"] = [
        *[t for t in web_ui.template_args.get("extended_tabs") or [] if t.get("key") != TAB_KEY],
        {"title": "Chaos", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        *[t for t in web_ui.template_args.get("extended_tables") or [] if t.get("key") != TAB_KEY],
        {"key": TAB_KEY, "structure": [{"key": "what", "title": "What"}, {"key": "target", "title": "Target"},
                                       {"key": "detail", "title": "Detail"}]}]

    @web_ui.app.before_request
    def begin_on_start() -> Response | None:
        # While the tab is loaded no page of another origin changes anything in the web
        # UI (Locust's own /swarm and /stop included); the tab's routes check more.
        try:
            guard.check_host(request)
            guard.check_origin(request)
        except Refused as refused:
            return Problem(403, refused.title, refused.detail).response()
        # The start form posts to /swarm; the run directory and its baseline come first.
        if request.method == "POST" and request.path == f"{base}/swarm":
            try:
                tab.prepare_run()
            except Problem as problem:
                return problem.response()
        return None

    @web_ui.app.after_request
    def extend(response: Response) -> Response:
        if request.path == f"{base}/stats/requests" and response.status_code == 200 and response.is_json:
            data = response.get_json()
            extended = [item for item in data.get("extended_stats") or [] if item.get("key") != TAB_KEY]
            extended.append({"key": TAB_KEY, "data": tab.table_rows()})
            response.set_data(json.dumps({**data, "extended_stats": extended}))
        elif (request.endpoint == "locust.index" and response.status_code == 200
              and response.mimetype == "text/html" and not response.direct_passthrough):
            page = response.get_data(as_text=True)
            tag = (f'<script src="./chaos/assets/chaos.js" data-harness-chaos="tab" {_token_attribute(tab)} '
                   'defer></script>')
            if "data-harness-chaos" not in page:
                response.set_data(page.replace("</body>", f"{tag}\n</body>", 1))
                response.headers["Cache-Control"] = "no-store"
                _same_origin(response)
        return response

    return tab


def on_init(environment: Environment) -> None:
    """Locust's init event on a process with a web UI: build the tab (`attach`)."""
    tab = attach(environment)
    if tab is not None:
        # Added at init, after every listener a locustfile registered at import: the
        # check starts once the recording has its final batches (harness.load.recording).
        test_stop: Any = environment.events.test_stop  # Locust's EventHook carries no annotations
        test_stop.add_listener(lambda **_: tab.on_test_stop())
