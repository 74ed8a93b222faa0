"""`harness run`: the whole run order, like Jepsen's `run!`.

start (or attach to) the stack → reset faults → read Redis's settings → load and
nemesis side by side → the load stops → heal every fault → let the consumers drain
(bounded) → export state → read Redis's settings again → check → report → stop the
stack this run started.

A fault that runs to the end of the load stays on until the Locust process has
exited (`drive_load`): healed at the run's duration, it would let the users'
last retries be answered and a run whose load window acknowledged nothing PASS.
When the load began, stopped and the faults were healed is kept in load.json, the
Redis readings in redis.json (harness.report.run_facts), for the report.

Cleanup is unconditional: each step that undoes something (stop the load, stop the
nemesis, heal the faults, resume paused consumers, copy the logs, stop a stack the
run started) is registered on an `ExitStack` as soon as what it undoes is acquired,
so a failing step never skips a later one. A step that fails is reported on stderr
and in the run directory (`harness.run.cleanup`), and makes the run a harness
failure: a fault that could not be healed is never followed by a PASS.

The exit code separates the kinds of bad news (harness.exit_codes): 1 when an
invariant was violated, 2 when the harness itself could not do its job
(`HarnessError`), 3 when the run proved too little.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, TextIO

from harness.catalog import DEFAULT_MIN_ACKNOWLEDGED, MUTANTS, SCENARIO_PROMISES, SCENARIOS
from harness.check.checker import CheckResult, HistoryFiles, check_run
from harness.check.final_reads import orders_to_read, read_orders
from harness.errors import HarnessError
from harness.exit_codes import VERDICT_EXIT_CODES
from harness.history import LOAD_STARTED
from harness.load.locust_process import DEFAULT_STOP_TIMEOUT, LocustProcess, locustfile_for, parse_master_address
from harness.load.settings import format_think_time, load_environment
from harness.names import DEFAULT_STACK_ROOT, ENV_APP_UNSAFE_DISABLE, ENV_THINK_TIME
from harness.nemesis.fake_clock import libfaketime_path
from harness.nemesis.plans import FaultWindow, NemesisRunner, Plan, clock_targets, load_plan, schedule
from harness.nemesis.toxiproxy_client import NemesisError
from harness.report.run_facts import LoadWindow, RedisCapture
from harness.report.run_report import summary_line, write_reports
from harness.run.cleanup import Cleanup, HealFailed
from harness.run.drain import export_state, wait_for_drain
from harness.run.progress import ProgressLine
from harness.run.redis_capture import read_redis_settings
from harness.run.rundir import RunDir, RunDirError, RunScope, RunSettings
from harness.stack import registry
from harness.stack.clocks import StackClocks
from harness.stack.info import StackInfo
from harness.stack.lifeline import RunGuard, signal_name
from harness.stack.liveness import describe_down, not_back, require_services_back
from harness.stack.local import (
    StackError,
    StackSettings,
    open_stack,
    start_stack,
    target_app_env,
)
from harness.stack.protocol import Stack

# A window ending this close to the run's duration runs to the end of the load: the
# schedule cuts a longer one at the duration, rounded to the millisecond.
HOLD_TOLERANCE = 0.01
# After the drain, a request that a client gave up on may still be finishing in the
# app; this long a pause lets it land before the state is read.
SETTLE_SECONDS = 0.5
INTERRUPT_DRAIN_SECONDS = 2.0
# How long a local Locust may take to start its users before the run is a harness failure.
LOAD_START_TIMEOUT = 60.0
# state.json keys a run directory must not keep (settings.json is shared freely).
SECRET_STATE_KEYS = ("webhook_secret", "internal_token")


@dataclass(frozen=True)
class RunSpec:
    """Everything one run needs, as one plain value (a Jepsen test map)."""

    scenario: str
    users: int = 20
    duration: float = 30.0
    spawn_rate: float | None = None
    # Seconds each user waits between two tasks, (low, high); None: the load's own
    # default (harness.load.settings.DEFAULT_THINK_TIME).
    think_time: tuple[float, float] | None = None
    # Seconds the users get to finish the task they are in when the load ends, before
    # Locust stops them (an operation cut short is recorded as indeterminate); None:
    # LocustProcess's default (3 s).
    stop_timeout: float | None = None
    # The socket of a Locust fork server (harness.load.forkserver) that forks this
    # run's Locust (a standalone one) instead of a new `python -m locust`: the smoke
    # job starts one for all its runs.
    locust_forkserver: Path | None = None
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
    stack_root: Path = DEFAULT_STACK_ROOT
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
        if self.think_time is not None:
            low, high = self.think_time
            if not 0 <= low <= high:
                raise HarnessError(f"--think-time must be LOW-HIGH with 0 <= LOW <= HIGH, got {low:g}-{high:g}")
            if self.scale_workers:
                raise HarnessError("--think-time does not reach the compose file's Locust workers "
                                   "(--scale-workers); leave it out there")
        if self.stop_timeout is not None and self.stop_timeout < 0:
            raise HarnessError("--stop-timeout must not be negative")
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
        for key in ("plan", "runs_root", "stack_root", "locust_forkserver"):
            data[key] = None if data[key] is None else str(data[key])
        data["unsafe_disable"] = list(self.unsafe_disable)
        data["think_time"] = None if self.think_time is None else list(self.think_time)
        data["app_env"] = dict(self.app_env)
        return data


@dataclass(frozen=True)
class RunOutcome:
    """A judged run: its directory, exit code, summary line and the typed check result
    (result.json is its serialisation, written by the report)."""

    run_dir: Path
    exit_code: int
    summary: str
    check: CheckResult


class LoadProcess(Protocol):
    """What the runner needs of a load (`LocustProcess`, `ComposeLocust`)."""

    log_path: Path

    @property
    def returncode(self) -> int | None: ...

    def start(self) -> None: ...

    def finished(self, *, timeout: float) -> bool: ...

    def stop(self) -> None: ...


class Resettable(Protocol):
    """A nemesis that can take every network fault away (`StackNemesis`, `Nemesis`)."""

    def reset(self) -> None: ...


def new_run_id(scenario: str, unsafe_disable: tuple[str, ...] = ()) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    suffix = f"-{'+'.join(unsafe_disable)}" if unsafe_disable else ""
    return f"{stamp}-{os.getpid()}-{scenario}{suffix}"


def stack_summary(info: StackInfo) -> dict[str, Any]:
    """The stack's state for settings.json: everything but its secrets."""
    return {key: value for key, value in info.to_json().items() if key not in SECRET_STATE_KEYS}


def run(spec: RunSpec, *, out: TextIO = sys.stderr) -> RunOutcome:
    """Run one scenario end to end; never raises for a violation (exit code 1).

    A run directory it created carries, whatever stops the run, a verdict or an
    interrupted mark: an interrupt that the guard did not see (one before the guard
    was entered, as on the main thread of `harness run`, or one that cut the guard's
    own exit short) is marked here."""
    spec.validate()
    run_id = spec.run_id or new_run_id(spec.scenario, spec.unsafe_disable)
    path = Path(spec.runs_root) / run_id
    ours = not path.exists()  # an existing directory is another run's: RunDir.create refuses it
    try:
        run_dir = RunDir.create(Path(spec.runs_root), run_id)
        plan = load_plan(Path(spec.plan)) if spec.plan is not None else None
        if spec.plan is not None:
            shutil.copyfile(spec.plan, run_dir.plan)
        # The guard marks the run interrupted on a signal and, if this process is killed
        # outright, its janitor stops what the run started and heals its faults.
        with RunGuard(run_dir.path) as guard:
            try:
                return _run_in(spec, run_dir, plan, guard, out=out)
            finally:
                guard.leave()  # a signal that comes as the run ends still reaches its guard
    except KeyboardInterrupt as interrupt:
        if ours:  # a run that has its verdict, or its mark already, is left as it is
            registry.mark_interrupted(path, signal_name=signal_name(interrupt), by="harness")
        raise


def _run_in(spec: RunSpec, run_dir: RunDir, plan: Plan | None, guard: RunGuard, *, out: TextIO) -> RunOutcome:
    cleanup = Cleanup(run_dir, out=out)
    with ExitStack() as held:
        # Registered first, so undone last: the stack outlives every other step.
        stack, attached = held.enter_context(_stack_for(spec, run_dir, out=out, guard=guard, cleanup=cleanup,
                                                        fake_clocks=clock_targets(plan)))
        info = stack.info
        token = info.internal_token or None
        if attached and not spec.compose:
            # A stack of our own keeps its logs under the run's stack/logs already.
            held.callback(cleanup.step("copy the service logs", lambda: _copy_logs(stack.info, run_dir.logs)))
        # Interrupted: a short drain, then export what the app holds, so `harness check`
        # can judge what was recorded (bounded: a CI sends SIGKILL after ~10 s).
        held.push(guard.on_interrupt(
            lambda: wait_for_drain(info, timeout=INTERRUPT_DRAIN_SECONDS),
            lambda: export_state(info.app_direct_url, run_dir.export, token=token)))
        scope = None
        if attached:
            # Earlier runs left state on this stack; the checker judges only what this
            # run created or changed, against a copy of the state before it.
            export_state(info.app_direct_url, run_dir.baseline, token=token)
            scope = RunScope(run_dir.baseline.name)
        run_dir.write_settings(RunSettings(
            run_id=run_dir.name, scenario=spec.scenario, mode="run",
            unsafe_disable=info.unsafe_disable or spec.unsafe_disable,
            users=spec.users, seed=spec.seed, duration=spec.duration,
            plan=str(spec.plan) if spec.plan is not None else None,
            promised_paths=tuple(promised_paths(spec.scenario, plan)),
            min_acknowledged=spec.min_acknowledged, spec=spec.to_json(),
            stack=stack_summary(info), started_at=time.time(), scope=scope))

        nemesis = stack.nemesis(recorder=guard)  # this stack's proxies; faults on the guard's lease
        heal_everything(nemesis, stack)
        capture = RedisCapture(before=read_redis_settings(info.redis_url))
        run_dir.write_redis_capture(capture)
        windows = schedule(plan, spec.duration, run_seed=spec.seed) if plan is not None else []
        clocks = StackClocks(Path(info.root), info) if clock_targets(plan) else None
        runner = NemesisRunner(nemesis, guard.processes_of(stack), run_dir.faults, clocks=clocks)
        locust = _load_process(spec, info, run_dir, guard)
        progress = ProgressLine(run_dir.histories, out=out, enabled=spec.progress)

        def wait_for_workers() -> None:
            if spec.remote_workers and isinstance(locust, LocustProcess) and locust.master_bind is not None:
                # The plan's clock starts with the load, once every worker joined.
                host, port = locust.master_bind
                print(f"harness: waiting for {spec.remote_workers} remote worker(s): on each, "
                      f"harness worker {spec.scenario} --master <this host>:{port} "
                      f"(listening on {host}:{port})", file=out)
                _wait_for_load(locust, run_dir.histories, spec.workers_wait + 5.0)
            elif not spec.scale_workers:  # a Locust of ours, on this host
                # The plan's clock starts with the load, not with Locust's process: on a
                # busy machine its first request came 4.3 s after it was spawned.
                _wait_for_load(locust, run_dir.histories, LOAD_START_TIMEOUT)

        def heal() -> None:
            try:  # before the heal's `start` could hide it: a crashed service came back by itself
                require_services_back(stack)
            except StackError as error:
                cleanup.failed("every crashed service back after the load", error)
            heal_everything(nemesis, stack)

        load_window = drive_load(locust, runner, windows, duration=spec.duration, cleanup=cleanup,
                                 heal=heal, progress=progress,
                                 before_faults=wait_for_workers)
        run_dir.write_load_window(load_window)
        nemesis_report = runner.report()
        for failure in nemesis_report.failures:
            if failure.phase == "heal":  # the window's fault outlived it: reported like any heal
                cleanup.failed(f"heal {failure.window}", failure.error)
        # Drain and export only on a healed stack: a fault still on would be judged as the app.
        cleanup.raise_if_failed()
        nemesis_report.raise_for_failure()  # a fault that could not be applied
        if locust.returncode not in (0, None):
            raise HarnessError(f"locust exited with {locust.returncode}; see {locust.log_path}")
        collect_state(stack, run_dir, drain_timeout=spec.drain_timeout, cleanup=cleanup)
        run_dir.write_redis_capture(replace(capture, after=read_redis_settings(info.redis_url)))
    cleanup.raise_if_failed()
    return check_saved_run(run_dir)


def drive_load(locust: LoadProcess, runner: NemesisRunner, windows: Sequence[FaultWindow], *,
               duration: float, cleanup: Cleanup, heal: Callable[[], None],
               progress: ProgressLine | None = None,
               before_faults: Callable[[], None] | None = None) -> LoadWindow:
    """The load and the nemesis side by side, then the heal; when each happened.

    The steps are undone in this order, whatever failed: stop the load, stop the
    nemesis (which heals what it still holds), heal every fault of the stack. A
    window that runs to the end of the load (the schedule cut it at `duration`) is
    not healed on the nemesis's clock, while Locust's users are still finishing
    their retries, but held until the Locust process has exited: no request is
    answered after the heal, so the acknowledgements counted are the load window's.
    """
    started = stopped = None
    with ExitStack() as load:
        load.callback(cleanup.step("heal every fault", heal))
        load.callback(cleanup.step("stop the nemesis", runner.stop))
        # Before start: a load that started half-way (a master without its workers) stops too.
        load.callback(cleanup.step("stop the load", locust.stop))
        locust.start()
        if before_faults is not None:
            before_faults()
        started = time.time()
        runner.start(windows, hold_from=max(duration - HOLD_TOLERANCE, 0.0))
        while not locust.finished(timeout=1.0) and runner.failure is None:
            if progress is not None:
                progress.update(active_faults=runner.active())
        if locust.returncode is not None:
            stopped = time.time()
        if progress is not None:
            progress.finish()
    return LoadWindow(started=started, stopped=stopped, healed=time.time())


def _load_process(spec: RunSpec, info: StackInfo, run_dir: RunDir, guard: RunGuard) -> LoadProcess:
    if spec.scale_workers:
        from harness.stack.compose import ComposeLocust

        return ComposeLocust(info=info, scenario=spec.scenario, users=spec.users,
                             spawn_rate=spec.spawn_rate or float(spec.users), duration=spec.duration,
                             workers=spec.scale_workers, run_dir=run_dir.path, seed=spec.seed, guard=guard)
    return LocustProcess(
        locustfile=locustfile_for(spec.scenario),
        host=info.app_url,
        users=spec.users,
        spawn_rate=spec.spawn_rate or float(spec.users),
        duration=spec.duration,
        processes=spec.processes,
        remote_workers=spec.remote_workers,
        master_bind=(parse_master_address(spec.master_bind, default_host="0.0.0.0")
                     if spec.master_bind else None),
        workers_wait=spec.workers_wait,
        output_dir=run_dir.locust,
        env=_load_env(spec, info, run_dir),
        guard=guard,
        stop_timeout=spec.stop_timeout if spec.stop_timeout is not None else DEFAULT_STOP_TIMEOUT,
        forkserver=spec.locust_forkserver,
    )


def collect_state(stack: Stack, run_dir: RunDir, *, drain_timeout: float,
                  cleanup: Cleanup | None = None) -> None:
    """After the faults are healed: let the consumers drain the stream (bounded), then,
    with the consumers paused, write the export and the final reads of every order
    the run's histories name. `harness run` and a swarm judged afterwards share it.
    A consumer that cannot be resumed afterwards is reported through `cleanup`
    (raised at once without one)."""
    info = stack.info
    token = info.internal_token or None
    wait_for_drain(info, timeout=drain_timeout)
    own = cleanup is None
    cleanup = cleanup if cleanup is not None else Cleanup(run_dir, out=sys.stderr)
    with _quiesced(stack, cleanup):
        export_state(info.app_direct_url, run_dir.export, token=token)
        orders = orders_to_read(HistoryFiles(run_dir.history_files()))
        read_orders(info.app_direct_url, orders, run_dir.final_reads)
    if own:
        cleanup.raise_if_failed()


def finish_run(stack: Stack, run_dir: Path | RunDir, *, drain_timeout: float = 30.0) -> RunOutcome:
    """The end of a run whose load is over, for a swarm the harness did not start
    (`harness check --stack`, the Chaos tab): heal every fault of the stack, drain,
    quiesce, export, final reads, check and report into `run_dir`."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    cleanup = Cleanup(run, out=sys.stderr)
    try:
        heal_everything(stack.nemesis(), stack)
    except HealFailed as error:
        cleanup.failed("heal every fault", error)
    cleanup.raise_if_failed()
    collect_state(stack, run, drain_timeout=drain_timeout, cleanup=cleanup)
    cleanup.raise_if_failed()
    return check_saved_run(run)


def _wait_for_load(locust: LoadProcess, histories: Path, timeout: float) -> None:
    """Until the Locust master starts the load (its workers all joined), bounded."""
    deadline = time.monotonic() + timeout
    while not (histories / LOAD_STARTED).exists():
        # A short wait: the plan's clock starts when this returns, so it must notice
        # the mark soon after the first user wrote it.
        if locust.finished(timeout=0.1):
            return  # it gave up waiting for workers: its exit code tells the caller
        if time.monotonic() > deadline:
            raise HarnessError(f"the Locust workers did not all join within {timeout:.0f} s")


def promised_paths(scenario: str, plan: Plan | None) -> list[str]:
    """The protective paths a run must exercise to be conclusive: the scenario's and the plan's."""
    promised = list(SCENARIO_PROMISES.get(scenario, ()))
    if plan is not None:
        promised += [path for path in plan.promises if path not in promised]
    return promised


def _consumers(info: StackInfo) -> list[str]:
    return [service.name for service in info.services if service.name.startswith("consumer-")]


@contextmanager
def _quiesced(stack: Stack, cleanup: Cleanup) -> Iterator[None]:
    """Consumers paused (and a short settle) while the state is read, so no late
    write lands between the export and the final reads; each resumed afterwards,
    whatever happened (a resume that fails is reported, and the others still run)."""
    with ExitStack() as paused:
        for name in _consumers(stack.info):
            stack.pause(name)
            paused.callback(cleanup.step(f"resume {name}", functools.partial(stack.resume, name)))
        time.sleep(SETTLE_SECONDS)
        yield


def check_saved_run(run_dir: Path | RunDir) -> RunOutcome:
    """Check a run directory and (re)write its reports."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(Path(run_dir))
    # A CheckerError (no export, unreadable history) is a HarnessError: exit 2.
    result = check_run(run)
    marker = run.interrupted_marker()
    if marker is not None:
        result.interrupted = marker  # a re-check of an interrupted run stays marked
    paths = write_reports(run, result)
    return RunOutcome(run.path, VERDICT_EXIT_CODES[result.verdict], summary_line(result, paths.report_html),
                      check=result)


SHAPE_ERRORS = (TypeError, AttributeError, KeyError, IndexError, ValueError, OverflowError, RecursionError)


def check_given_run(run_dir: Path) -> RunOutcome:
    """`check_saved_run` of a directory given on the command line (`harness check DIR`).

    The checker and the report read the fields of 10^7 records without checking each
    one's type (that is what keeps them fast), which is sound for the files a run of
    the harness wrote. A directory given by hand may hold anything: a value of the
    wrong type, wherever the checker or the report trips on it, is a RunDirError of
    one line (exit 2), not a traceback."""
    try:
        return check_saved_run(run_dir)
    except SHAPE_ERRORS as error:
        detail = (str(error).strip().splitlines() or [""])[0]
        raise RunDirError(f"{run_dir}: a file of this run holds a value of the wrong type "
                          f"({type(error).__name__}: {detail}); was it written by the harness?") from error


@contextmanager
def _stack_for(spec: RunSpec, run_dir: RunDir, *, out: TextIO, guard: RunGuard,
               cleanup: Cleanup, fake_clocks: tuple[str, ...] = ()) -> Iterator[tuple[Stack, bool]]:
    """The stack `harness up` left running (kept running), or one of our own (stopped
    after, as a cleanup step: a stack that would not stop is reported), its
    `fake_clocks` services under libfaketime (a running stack has none: refused)."""
    try:
        running = open_stack(Path(spec.stack_root)) if spec.attach else None
    except StackError as error:
        raise HarnessError(str(error)) from error
    if running is not None:
        wanted = set(spec.unsafe_disable)
        actual = set(running.info.unsafe_disable)
        if wanted and wanted != actual:
            raise HarnessError(
                f"the running stack in {spec.stack_root} has unsafe_disable={sorted(actual)}, "
                f"not {sorted(wanted)}; stop it with `harness down` or drop --unsafe-disable"
            )
        if fake_clocks:
            raise HarnessError(f"the plan moves the clock of {', '.join(fake_clocks)}, which the running stack in "
                               f"{spec.stack_root} did not start under the fake clock; run without --attach "
                               "(a run's own stack starts them under libfaketime, docs/clocks.md)")
        print(f"harness: using the running stack in {spec.stack_root}", file=out)
        yield running, True
        return
    settings = own_stack_settings(spec, run_dir.stack_root, proxy_prefix=f"run-{guard.short_id}-",
                                  fake_clocks=fake_clocks)
    try:
        stack = start_stack(settings, lifeline=guard.lifeline)
    except StackError as error:
        raise HarnessError(f"the stack would not start: {error}") from error
    with ExitStack() as owned:
        owned.callback(cleanup.step("stop the run's stack", stack.down))
        yield stack, False


def app_environment(spec: RunSpec) -> dict[str, str]:
    """The TARGET_APP_* environment the app of a stack started for `spec` runs with:
    this process's, the spec's `app_env`, and the layers it runs without."""
    env = target_app_env(os.environ)
    env.update(spec.app_env)
    if spec.unsafe_disable:
        env[ENV_APP_UNSAFE_DISABLE] = ",".join(spec.unsafe_disable)
    return env


def own_stack_settings(spec: RunSpec, root: Path, *, proxy_prefix: str,
                       fake_clocks: tuple[str, ...] = ()) -> StackSettings:
    """The settings of a stack the harness starts for `spec` in `root` (owned by a
    run: it needs its owner's lifeline). `proxy_prefix` names its proxies on a shared
    Toxiproxy ($TOXIPROXY_URL) only; `fake_clocks` are the services a plan's clock
    faults move (libfaketime must be installed: ClockUnavailable otherwise)."""
    if fake_clocks:
        libfaketime_path()  # before any service starts: the one-line install hint
    shared = os.environ.get("TOXIPROXY_URL") or None
    return StackSettings(
        root=root,
        app_workers=spec.app_workers,
        consumers=spec.consumers,
        env=app_environment(spec),
        compose=spec.compose,
        owner="run",
        # On a shared Toxiproxy the stack's proxies get names of their own.
        toxiproxy_url=shared,
        proxy_prefix=proxy_prefix if shared else "",
        fake_clocks=fake_clocks,
    )


def _load_env(spec: RunSpec, info: StackInfo, run_dir: RunDir) -> dict[str, str]:
    env = dict(os.environ)
    env.update(load_environment(info, seed=spec.seed, history_dir=run_dir.histories))
    if spec.think_time is not None:
        env[ENV_THINK_TIME] = format_think_time(spec.think_time)
    return env


def heal_everything(nemesis: Resettable, stack: Stack) -> None:
    """Remove every toxic, re-enable every proxy, resume anything paused, start anything down.

    Every step is tried whatever failed before it; a failure (a reset that left a
    fault on, a service that would not resume or start) is never dropped: all of
    them are raised together as one `HealFailed` (a HarnessError) at the end.
    """
    failures: list[str] = []
    try:
        nemesis.reset()
    except NemesisError as error:
        failures.append(f"could not reset Toxiproxy: {error}")
    try:
        services = stack.services()
    except StackError as error:
        failures.append(f"could not read the services' status: {error}")
        services = []
    for service in services:
        if service["status"] != "paused":
            continue
        try:
            stack.resume(service["name"])
        except StackError as error:
            failures.append(f"service {service['name']} could not be resumed: {error}")
    try:
        health = stack.health()
    except StackError as error:
        failures.append(f"could not read the services' health: {error}")
        health = {}
    not_started = False
    for name, healthy in health.items():
        if healthy:
            continue
        try:
            stack.start(name)
        except StackError as error:
            failures.append(f"service {name} did not come back: {error}")
            not_started = True
    down = not_back(services)
    if not_started and down:
        # The cause, more often than not: a service the others need died on its own
        # (an app stays unhealthy while its Redis is down).
        failures.append(f"down on their own: {describe_down(down)}")
    if failures:
        raise HealFailed(failures)


def _copy_logs(info: StackInfo, destination: Path) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    for service in info.services:
        if service.log and Path(service.log).is_file():
            shutil.copyfile(service.log, destination / Path(service.log).name)
