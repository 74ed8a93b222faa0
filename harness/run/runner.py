"""`harness run`: the whole run order, like Jepsen's `run!`.

start (or attach to) the stack → reset faults → load and nemesis side by side →
heal every fault → let the consumers drain (bounded) → export state → check →
report → stop the stack this run started.

The exit code separates the two kinds of bad news: 1 when an invariant was
violated, 2 when the harness itself could not do its job (`HarnessError`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness.catalog import DEFAULT_MIN_ACKNOWLEDGED, MUTANTS, SCENARIO_PROMISES, SCENARIOS
from harness.check.checker import HistoryFiles, check_run
from harness.check.final_reads import FINAL_READS_FILE, orders_to_read, read_orders
from harness.errors import HarnessError
from harness.history import LOAD_STARTED, history_files
from harness.load.locust_process import LocustProcess, locustfile_for, parse_master_address
from harness.load.settings import load_environment
from harness.nemesis.plans import NemesisRunner, Plan, load_plan, schedule
from harness.nemesis.toxiproxy_client import Nemesis, NemesisError
from harness.processes.lifeline import RunGuard
from harness.processes.registry import interrupted_marker
from harness.report.run_report import summary_line, write_reports
from harness.run.drain import export_state, wait_for_drain
from harness.run.progress import ProgressLine
from harness.stack.local import (
    RunningStack,
    StackError,
    StackSettings,
    open_stack,
    start_stack,
    target_app_env,
)

EXIT_OK = 0
EXIT_VIOLATION = 1
EXIT_HARNESS = 2
EXIT_INCONCLUSIVE = 3
VERDICT_EXIT_CODES = {"pass": EXIT_OK, "fail": EXIT_VIOLATION, "inconclusive": EXIT_INCONCLUSIVE}
BASELINE_FILE = "baseline.ndjson"
# After the drain, a request that a client gave up on may still be finishing in the
# app; this long a pause lets it land before the state is read.
SETTLE_SECONDS = 0.5
INTERRUPT_DRAIN_SECONDS = 2.0


@dataclass(frozen=True)
class RunSpec:
    """Everything one run needs, as one plain value (a Jepsen test map)."""

    scenario: str
    users: int = 20
    duration: float = 30.0
    spawn_rate: float | None = None
    plan: Path | None = None
    seed: int = 0
    processes: int = 1  # local Locust worker processes (`--workers`)
    # Locust workers that join from elsewhere (`harness worker --master HOST:PORT`);
    # the master listens on `master_bind` ("HOST:PORT") and waits `workers_wait` s for them.
    remote_workers: int = 0
    master_bind: str | None = None
    workers_wait: float = 120.0
    compose: bool = False
    # > 0: the load runs on the compose file's Locust master and this many workers
    # (`harness run --compose --scale-workers N`), not on Locust on the host.
    scale_workers: int = 0
    unsafe_disable: tuple[str, ...] = ()
    runs_root: Path = Path("runs")
    stack_root: Path = Path(".harness")
    app_workers: int = 4
    consumers: int = 2
    drain_timeout: float = 30.0
    min_acknowledged: int = DEFAULT_MIN_ACKNOWLEDGED
    app_env: Mapping[str, str] = field(default_factory=dict)
    run_id: str | None = None
    progress: bool = True
    # False: always start a private stack, even when `harness up` left one running
    # (the smoke job and the matrix need a fresh app per mutant).
    attach: bool = True

    def validate(self) -> None:
        if self.scenario not in SCENARIOS:
            raise HarnessError(f"unknown scenario {self.scenario!r}; choose one of {', '.join(SCENARIOS)}")
        for mutant in self.unsafe_disable:
            if mutant not in MUTANTS:
                raise HarnessError(f"unknown --unsafe-disable value {mutant!r}; choose from {', '.join(MUTANTS)}")
        if self.users < 1:
            raise HarnessError("--users must be at least 1")
        if self.duration <= 0:
            raise HarnessError("--duration must be positive")
        if self.scale_workers and not self.compose:
            raise HarnessError("--scale-workers runs the compose Locust workers; it needs --compose")
        if self.processes < 0 or (self.processes == 0 and self.remote_workers < 1):
            raise HarnessError("--workers must be at least 1 (0 only with --remote-workers)")
        if self.remote_workers < 0:
            raise HarnessError("--remote-workers must not be negative")
        if self.master_bind is not None:
            parse_master_address(self.master_bind, default_host="0.0.0.0")
        if self.min_acknowledged < 0:
            raise HarnessError("--min-acknowledged must not be negative")
        if self.plan is not None and not Path(self.plan).is_file():
            raise HarnessError(f"fault plan {self.plan} does not exist")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("plan", "runs_root", "stack_root"):
            data[key] = None if data[key] is None else str(data[key])
        data["unsafe_disable"] = list(self.unsafe_disable)
        data["app_env"] = dict(self.app_env)
        return data


@dataclass
class RunOutcome:
    run_dir: Path
    exit_code: int
    result: dict[str, Any] | None
    summary: str


def new_run_id(scenario: str, unsafe_disable: tuple[str, ...] = ()) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    suffix = f"-{'+'.join(unsafe_disable)}" if unsafe_disable else ""
    return f"{stamp}-{os.getpid()}-{scenario}{suffix}"


def run(spec: RunSpec, *, out: TextIO = sys.stderr) -> RunOutcome:
    """Run one scenario end to end; never raises for a violation (exit code 1)."""
    spec.validate()
    run_id = spec.run_id or new_run_id(spec.scenario, spec.unsafe_disable)
    run_dir = Path(spec.runs_root) / run_id
    run_dir.mkdir(parents=True, exist_ok=False)
    (run_dir / "histories").mkdir()
    plan = load_plan(Path(spec.plan)) if spec.plan is not None else None
    if spec.plan is not None:
        shutil.copyfile(spec.plan, run_dir / "plan.yaml")
    # The guard marks the run interrupted on a signal and, if this process is killed
    # outright, its janitor stops what the run started and heals its faults.
    with RunGuard(run_dir) as guard:
        return _run_in(spec, run_id, run_dir, plan, guard, out=out)


def _run_in(spec: RunSpec, run_id: str, run_dir: Path, plan: Plan | None, guard: RunGuard,
            *, out: TextIO) -> RunOutcome:
    with ExitStack() as cleanup:
        stack, attached = cleanup.enter_context(_stack_for(spec, run_dir, out=out, guard=guard))
        state = stack.state
        token = state.get("internal_token") or None
        # Interrupted: a short drain, then export what the app holds, so `harness check`
        # can judge what was recorded (bounded: a CI sends SIGKILL after ~10 s).
        cleanup.push(guard.on_interrupt(
            lambda: wait_for_drain(state, timeout=INTERRUPT_DRAIN_SECONDS),
            lambda: export_state(state["app_direct_url"], run_dir / "export.ndjson", token=token)))
        settings = {
            "run_id": run_id,
            "scenario": spec.scenario,
            "unsafe_disable": list(state.get("unsafe_disable") or spec.unsafe_disable),
            "users": spec.users,
            "seed": spec.seed,
            "duration": spec.duration,
            "promised_paths": promised_paths(spec.scenario, plan),
            "min_acknowledged": spec.min_acknowledged,
            "spec": spec.to_json(),
            "stack": {key: value for key, value in state.items()
                      if key not in ("webhook_secret", "internal_token")},
            "started_at": time.time(),
        }
        if attached:
            # Earlier runs left state on this stack; the checker judges only what this
            # run created or changed, against a copy of the state before it.
            export_state(state["app_direct_url"], run_dir / BASELINE_FILE, token=token)
            settings["scope"] = {"baseline": BASELINE_FILE}
        (run_dir / "settings.json").write_text(json.dumps(settings, indent=2))

        nemesis = stack.nemesis(recorder=guard)  # this stack's proxies; faults on the guard's lease
        heal_everything(nemesis, stack)
        windows = schedule(plan, spec.duration, run_seed=spec.seed) if plan is not None else []
        runner = NemesisRunner(nemesis, guard.processes_of(stack), run_dir / "faults.jsonl")
        if spec.scale_workers:
            from harness.stack.compose import ComposeLocust

            locust = ComposeLocust(state=state, scenario=spec.scenario, users=spec.users,
                                   spawn_rate=spec.spawn_rate or float(spec.users), duration=spec.duration,
                                   workers=spec.scale_workers, run_dir=run_dir, seed=spec.seed, guard=guard)
        else:
            locust = LocustProcess(
                locustfile=locustfile_for(spec.scenario),
                host=state["app_url"],
                users=spec.users,
                spawn_rate=spec.spawn_rate or float(spec.users),
                duration=spec.duration,
                processes=spec.processes,
                remote_workers=spec.remote_workers,
                master_bind=(parse_master_address(spec.master_bind, default_host="0.0.0.0")
                             if spec.master_bind else None),
                workers_wait=spec.workers_wait,
                output_dir=run_dir / "locust",
                env=_load_env(spec, state, run_dir),
                guard=guard,
            )
        progress = ProgressLine(run_dir / "histories", out=out, enabled=spec.progress)
        try:
            locust.start()
            if spec.remote_workers:
                # The plan's clock starts with the load, once every worker joined.
                host, port = locust.master_bind
                print(f"harness: waiting for {spec.remote_workers} remote worker(s): on each, "
                      f"harness worker {spec.scenario} --master <this host>:{port} "
                      f"(listening on {host}:{port})", file=out)
                _wait_for_load(locust, run_dir / "histories", spec.workers_wait + 5.0)
            runner.start(windows)
            while not locust.finished(timeout=1.0) and runner.failure is None:
                progress.update(active_faults=runner.active())
            progress.finish()
        finally:
            locust.stop()
            runner.stop()
            heal_everything(nemesis, stack)
        if runner.failure is not None:
            raise HarnessError(f"a fault could not be applied: {runner.failure}")
        if locust.returncode not in (0, None):
            raise HarnessError(
                f"locust exited with {locust.returncode}; see {locust.log_path}"
            )
        collect_state(stack, run_dir, drain_timeout=spec.drain_timeout)
        if attached and not spec.compose:
            # A stack of our own keeps its logs under run_dir/stack/logs already.
            _copy_logs(state, run_dir / "logs")
    return check_saved_run(run_dir)


def collect_state(stack: RunningStack, run_dir: Path, *, drain_timeout: float) -> None:
    """After the faults are healed: let the consumers drain the stream (bounded), then,
    with the consumers paused, write `export.ndjson` and the final reads of every order
    `run_dir/histories` names. `harness run` and a swarm judged afterwards share it."""
    state = stack.state
    token = state.get("internal_token") or None
    wait_for_drain(state, timeout=drain_timeout)
    with _quiesced(stack):
        export_state(state["app_direct_url"], run_dir / "export.ndjson", token=token)
        orders = orders_to_read(HistoryFiles(history_files(run_dir / "histories")))
        read_orders(state["app_direct_url"], orders, run_dir / FINAL_READS_FILE)


def finish_run(stack: RunningStack, run_dir: Path, *, drain_timeout: float = 30.0) -> RunOutcome:
    """The end of a run whose load is over, for a swarm the harness did not start
    (`harness check --stack`, the Chaos tab): heal every fault of the stack, drain,
    quiesce, export, final reads, check and report into `run_dir`."""
    heal_everything(stack.nemesis(), stack)
    collect_state(stack, Path(run_dir), drain_timeout=drain_timeout)
    return check_saved_run(Path(run_dir))


def _wait_for_load(locust: Any, histories: Path, timeout: float) -> None:
    """Until the Locust master starts the load (its workers all joined), bounded."""
    deadline = time.monotonic() + timeout
    while not (histories / LOAD_STARTED).exists():
        if locust.finished(timeout=0.5):
            return  # it gave up waiting for workers: its exit code tells the caller
        if time.monotonic() > deadline:
            raise HarnessError(f"the Locust workers did not all join within {timeout:.0f} s")


def promised_paths(scenario: str, plan: Plan | None) -> list[str]:
    """The protective paths a run must exercise to be conclusive: the scenario's and the plan's."""
    promised = list(SCENARIO_PROMISES.get(scenario, ()))
    if plan is not None:
        promised += [path for path in plan.promises if path not in promised]
    return promised


@contextmanager
def _quiesced(stack: RunningStack) -> Iterator[None]:
    """Consumers paused (and a short settle) while the state is read, so no late
    write lands between the export and the final reads; resumed afterwards."""
    consumers = [service["name"] for service in stack.state.get("services", [])
                 if str(service.get("name", "")).startswith("consumer-")]
    paused = []
    try:
        for name in consumers:
            stack.pause(name)
            paused.append(name)
        time.sleep(SETTLE_SECONDS)
        yield
    finally:
        for name in paused:
            stack.resume(name)


def check_saved_run(run_dir: Path) -> RunOutcome:
    """Check a run directory and (re)write its reports."""
    # A CheckerError (no export, unreadable history) is a HarnessError: exit 2.
    result = check_run(Path(run_dir)).to_dict()
    marker = interrupted_marker(Path(run_dir))
    if marker is not None:
        result["interrupted"] = marker  # a re-check of an interrupted run stays marked
    paths = write_reports(Path(run_dir), result)
    exit_code = VERDICT_EXIT_CODES[str(result.get("verdict") or ("pass" if result["valid"] else "fail"))]
    return RunOutcome(run_dir, exit_code, result, summary_line(result, paths.report_html))


@contextmanager
def _stack_for(spec: RunSpec, run_dir: Path, *, out: TextIO,
               guard: RunGuard) -> Iterator[tuple[RunningStack, bool]]:
    """The stack `harness up` left running (kept running), or one of our own (stopped after)."""
    try:
        running = open_stack(Path(spec.stack_root)) if spec.attach else None
    except StackError as error:
        raise HarnessError(str(error)) from error
    if running is not None:
        wanted = set(spec.unsafe_disable)
        actual = set(running.state.get("unsafe_disable") or [])
        if wanted and wanted != actual:
            raise HarnessError(
                f"the running stack in {spec.stack_root} has unsafe_disable={sorted(actual)}, "
                f"not {sorted(wanted)}; stop it with `harness down` or drop --unsafe-disable"
            )
        print(f"harness: using the running stack in {spec.stack_root}", file=out)
        yield running, True
        return
    env = target_app_env(os.environ)
    env.update(spec.app_env)
    if spec.unsafe_disable:
        env["TARGET_APP_UNSAFE_DISABLE"] = ",".join(spec.unsafe_disable)
    settings = StackSettings(
        root=run_dir / "stack",
        app_workers=spec.app_workers,
        consumers=spec.consumers,
        env=env,
        compose=spec.compose,
        owner="run",
        # On a shared Toxiproxy ($TOXIPROXY_URL) the run's proxies get names of their own.
        toxiproxy_url=os.environ.get("TOXIPROXY_URL") or None,
        proxy_prefix=f"run-{guard.short_id}-" if os.environ.get("TOXIPROXY_URL") else "",
    )
    try:
        stack = start_stack(settings, lifeline=guard.lifeline)
    except StackError as error:
        raise HarnessError(f"the stack would not start: {error}") from error
    try:
        yield stack, False
    finally:
        stack.down()


def _load_env(spec: RunSpec, state: Mapping[str, Any], run_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(load_environment(state, seed=spec.seed, history_dir=run_dir / "histories"))
    return env


def heal_everything(nemesis: Nemesis, stack: RunningStack) -> None:
    """Remove every toxic, re-enable every proxy, resume anything paused, start anything down."""
    try:
        nemesis.reset()
    except NemesisError as error:
        raise HarnessError(f"could not reset Toxiproxy: {error}") from error
    for service in stack.state.get("services", []):
        try:
            stack.resume(service["name"])
        except StackError:
            pass  # resuming a running service is not an error worth stopping for
    health = stack.health()
    down = [name for name, healthy in health.items() if not healthy]
    for name in down:
        try:
            stack.start(name)
        except StackError as error:
            raise HarnessError(f"service {name} did not come back: {error}") from error


def _copy_logs(state: Mapping[str, Any], destination: Path) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    for service in state.get("services", []):
        log = service.get("log")
        if log and Path(log).is_file():
            shutil.copyfile(log, destination / Path(log).name)

