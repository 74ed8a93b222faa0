"""`harness smoke` and `harness matrix`: proof that the checker can fail.

The smoke job runs every scenario under its plan against the correct app (all must
pass, conclusively: every promised path exercised), the API and the message layers'
scenarios under the `crash-points` plan, then each negative control against the one
scenario that must catch it (each must fail, by the invariant that guards the rule it
breaks), all but those `harness.catalog.SMOKE_EXEMPT` names with the reason. The matrix runs every mutant against every scenario and shows which scenario
catches which missing layer.

A control whose rule only a failure between two steps breaks
(`harness.catalog.CONTROL_CRASH_POINTS`) is not left to the timing of random faults:
its cell runs under a plan made for it (`control_plan`) that arms exactly its crash
points, with the action `CONTROL_CRASH_ACTIONS` names (`crash` otherwise), from early
in the run to the end of the load, so it is caught on a busy machine as on an idle one.

Cells share stacks: `plan_lanes` puts the steps on `parallel` lanes, and a
lane starts one stack (`lane_stack`) and runs its steps one after another on it, the
lanes side by side. A step whose app configuration (TARGET_APP_* environment, app
workers) is the previous step's runs on the stack as it is: the runner attaches to it,
heals every fault and disarms every crash point first, and judges only what its own
run created or changed (a baseline export, harness.check.run_scope). A step with
another configuration (each control has its own) first gets the lane's app and
consumers restarted with it, Redis emptied and the crash points disarmed
(`RunningStack.restart_services`): it starts from a stack as fresh as a new one. A
step that ended in a harness failure (a stack it could not restart, a drain that timed
out) leaves its stack to no one: the lane stops it and starts a fresh one for its next
step. Every stack a lane started is stopped when the lane ends, however it ends (an
error, Ctrl-C); one that will not stop is the job's harness failure. Compose stacks
(`--compose`) keep a stack of their own per step.

A step that ends without the evidence it exists for (`lacks_evidence`: a correct run
inconclusive, a promised path not reached; a control whose own invariant held) runs
again, on the same stack, with MORE_LOAD_FACTOR times its load, at most
MORE_LOAD_RUNS times. A machine twice as busy makes half the requests in a step's
seconds (CI's made a tenth), so a fixed load would make the verdict depend on the
machine. This never turns a failure into a pass: a correct run that violated an
invariant is not run again, and a control counts as caught only by a run of its own
that caught it. Every run a step made stays in the runs root, and the step says how
many it took (`SmokeStep.earlier`).
"""

from __future__ import annotations

import io
import math
import secrets
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import yaml

from harness import bundled
from harness.catalog import CONTROL_CRASH_ACTIONS, CONTROL_CRASH_POINTS, MUTANTS, SCENARIOS
from harness.errors import HarnessError
from harness.exit_codes import EXIT_HARNESS, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_VIOLATION
from harness.load.forkserver import LocustForkServer
from harness.load.settings import DEFAULT_THINK_TIME
from harness.nemesis.plans import parse_plan
from harness.report.run_report import MatrixCell, format_matrix_table, write_matrix_report
from harness.run.rundir import RunDir
from harness.run.runner import RunOutcome, RunSpec, app_environment, new_run_id, own_stack_settings, run
from harness.stack.lifeline import Lifeline, wait_for_futures
from harness.stack.local import RunningStack, StackError, start_stack

# The plan each scenario runs under in the smoke job: the duplicate source it targets.
SCENARIO_PLANS: dict[str, str | None] = {
    "timeout_replay": "flaky-network",
    "duplicate_webhooks": "redis-brownout",
    "redelivered_messages": "consumer-crashes",
    "mixed": "chaos",
}
# Correct-app runs beyond one per scenario: durability (Redis SIGKILLed three times
# during `mixed` must lose no acknowledged payment, order or inbox entry).
EXTRA_CORRECT_RUNS: tuple[tuple[str, str], ...] = (
    ("mixed", "redis-kills"),
    # A crash (or a transient error, a lost reply) at every step boundary of the API
    # and the message layers must lose or duplicate nothing.
    ("timeout_replay", "crash-points"),
    ("redelivered_messages", "crash-points"),
)

# A control's own crash points, armed from CONTROL_START to the end of the load with
# this chance at each pass and at most CONTROL_COUNT firings. One firing breaks the
# rule of most controls; consumer-ack-early's shows only when the message lost has no
# other copy (about a third of the firings: the producers duplicate most messages), so
# it needs a dozen or more. The cap keeps the crashed processes few enough to come
# back while the load runs.
CONTROL_START = 0.5
CONTROL_PROBABILITY = 0.4
CONTROL_COUNT = 16
# Their cells' load before the cells shared stacks (the violations come with the first firings:
# 18-47 per 8 s run); each control's own load is now CONTROL_LOADS.
CONTROL_DURATION = 6.0
# Seconds of load each control's cell gets: `control_load` of the worst seconds of
# load to the first violation of its own invariant over 5 seeds, measured by
# benchmarks/bench_detection.py (benchmarks/results/detection.json; a test holds
# these to it). A new control gets CONTROL_DURATION until it is measured.
# Measured 2026-12-02 with the job's think time (worst first violation, seconds).
CONTROL_LOADS: dict[str, float] = {
    "api": 3.0,                  # 0.057
    "api-fingerprint": 3.0,      # 0.056
    # 4 s, not the rule's 3: full-speed users (2026-12-01, load 9-14) took 1.0-1.3 s.
    "api-tenant": 4.0,           # 0.562
    "incomplete-body": 3.0,      # 0.485
    "order-tenant": 4.0,         # 0.472
    "domain": 3.0,               # 0.038
    "domain-amount": 3.0,        # 0.048
    "webhook-signature": 3.0,    # 0.033
    "inbox": 3.0,                # 0.12
    "inbox-nonatomic": 3.0,      # 0.381
    "inbox-dead-letter": 3.0,    # 0.499
    "consumer-ack-early": 3.0,   # 0.415
    # Few violations a second (0.5-1.5): a second above the rule. domain-nonatomic's
    # one point (domain.after_guard) waits for the first payments, which come after
    # the orders: on a machine at load 10 a 4 s cell once fired it zero times (caught
    # anyway, by a race): a second more, so the crash is the proof.
    "domain-nonatomic": 5.0,     # 1.505
    "recovery-nonatomic": 4.0,   # 0.702
}
# Never less: Locust counts its run time from its first user, whole seconds only,
# and on a busy machine its users' first answers came more than a second later.
MIN_CONTROL_LOAD = 3.0
# A control's cell runs this many gunicorn workers (fewer processes to start and stop
# beside the others: the job is bound by its CPU); the correct runs keep the base's.
CONTROL_APP_WORKERS = 2
# A correct run under `crash-points` keeps at least this many: a window of its plan
# crashes up to two workers, and with none left every arming and disarming of the
# next windows (through the app's internal listener) waited for gunicorn to replace
# them; on a busy machine the last three windows then fell after the load (seen with
# 2 workers in the suite's smoke job).
CRASH_POINTS_APP_WORKERS = 3
CONTROL_PLANS_DIR = "control-plans"  # under the runs root: the plans the cells ran
# The message layer's controls: a short reclaim time, so an entry whose consumer
# crashed is redelivered while the load still runs.
RECLAIM_ENV = {"TARGET_APP_RECLAIM_IDLE_MS": "1000"}

# `harness smoke`'s defaults (its --users and --duration): the load of a correct
# run; a control's cell may load for less (CONTROL_DURATION).
SMOKE_USERS = 10
SMOKE_DURATION = 8.0
# Its controls' think time (--think-time): each user waits 0.1-0.2 s between two
# tasks, not the 0-0.05 s of a single run (which the correct runs keep). Six lanes
# of closed-loop users at full speed kept both cores busy with load alone, and every
# Locust, app and consumer starting or stopping beside them waited for the CPU (a
# step's start 3-5 s instead of 1 s).
# Measured: 66.6 s for the job at full speed, 56.8 s with these waits, idle machine,
# every control still caught (benchmarks/README.md).
SMOKE_THINK_TIME = (0.1, 0.2)
# Seconds its users may finish their task when a step's load ends (--stop-timeout),
# not Locust's 3: a mixed or crash-point step's users are often inside a retry then,
# and each step waited out the 3 s; an operation cut short is indeterminate, which
# every invariant allows.
SMOKE_STOP_TIMEOUT = 1.0

# Lanes side by side (`--parallel`), each one stack its steps share. Measured on 2
# cores shared with other jobs, `time harness smoke`: 4 lanes 108 s (load average
# 3-8); 6 lanes 76-103 s (load average 7-23); 8 lanes 81 s with a correct run
# inconclusive (its plan's recovery path not reached: the users' requests starved): 6.
DEFAULT_PARALLEL = 6
# Where the lanes' stacks live, under the runs root (each lane's in lane-<n>).
LANE_STACKS_DIR = "smoke-stacks"
# Seconds a lane's step is expected to take beyond its load (Locust's start, about
# 5 s, and wind-down, about 2.7 s, then the drain, export, check and report), the
# message layer's drain, a plan's heal, and the gap a restart of the app and
# consumers puts before a step (5.5 s on average, against 0.4 s between steps of one
# configuration): measured over three jobs of 4 and 6 lanes at a load average of
# 8-17; `plan_lanes` balances the lanes by them.
STEP_OVERHEAD_S = 9.0
MESSAGE_DRAIN_S = 3.0
PLAN_HEAL_S = 1.0
RESTART_S = 5.0
STACK_START_S = 9.0
# A step without its evidence runs again with this many times its load, at most this
# many more times (module docstring): 3 s, 6 s, 12 s for a control; 8, 16, 32 s for a
# correct run. On an idle machine no step needs it (benchmarks/README.md).
MORE_LOAD_FACTOR = 2.0
MORE_LOAD_RUNS = 2


@dataclass(frozen=True)
class MutantCase:
    """The scenario (and plan) that must catch one broken rule, and by which invariant."""

    mutant: str
    scenario: str
    plan: str | None
    invariant: str
    app_env: dict[str, str] = field(default_factory=dict)
    users: int | None = None
    # Its cell's think time when not the job's (SMOKE_THINK_TIME): None, the job's.
    think_time: tuple[float, float] | None = None


MUTANT_CASES = (
    MutantCase("api", "timeout_replay", None, "one_order_per_key"),
    MutantCase("api-fingerprint", "timeout_replay", None, "answers_match_requests"),
    MutantCase("api-tenant", "timeout_replay", None, "tenant_isolation"),
    MutantCase("incomplete-body", "timeout_replay", "cut-bodies", "answers_match_requests"),
    MutantCase("order-tenant", "timeout_replay", None, "tenant_isolation"),
    MutantCase("domain", "duplicate_webhooks", None, "one_payment_per_order"),
    MutantCase("domain-amount", "duplicate_webhooks", None, "answers_match_requests"),
    MutantCase("webhook-signature", "duplicate_webhooks", None, "answers_match_requests"),
    MutantCase("inbox", "redelivered_messages", None, "message_effects_once"),
    # Caught only with their catalog.CONTROL_CRASH_POINTS armed: their cells name no
    # plan and run under their own (`control_plan`).
    # Their users at full speed: each crash breaks the rule only for a message whose fact
    # has no other copy, a crashed consumer takes seconds to come back on a busy
    # machine, so what counts is how many messages each crash finds. With the job's
    # think time one inbox-dead-letter cell found none in its three crashes.
    MutantCase("inbox-nonatomic", "redelivered_messages", None, "message_effects_once", RECLAIM_ENV,
               think_time=DEFAULT_THINK_TIME),
    MutantCase("inbox-dead-letter", "redelivered_messages", None, "no_parked_payment", RECLAIM_ENV,
               think_time=DEFAULT_THINK_TIME),
    MutantCase("consumer-ack-early", "redelivered_messages", None, "no_lost_acknowledgement", RECLAIM_ENV,
               think_time=DEFAULT_THINK_TIME),
    MutantCase("domain-nonatomic", "duplicate_webhooks", None, "one_payment_per_order"),
    MutantCase("recovery-nonatomic", "timeout_replay", None, "one_order_per_key"),
)


def control_load(worst_latency_s: float) -> float:
    """The load a control's cell needs: twice its worst latency plus a second (whole
    seconds, as Locust counts its run time), at least MIN_CONTROL_LOAD."""
    return max(MIN_CONTROL_LOAD, float(math.ceil(2 * worst_latency_s + 1)))


def cell_duration(mutant: str, base_duration: float) -> float:
    """A control's cell load: its measured CONTROL_LOADS (CONTROL_DURATION if not yet
    measured), never more than the job's own duration."""
    return min(base_duration, CONTROL_LOADS.get(mutant, CONTROL_DURATION))


def plan_path(name: str | None) -> Path | None:
    return None if name is None else bundled.plan_path(name)


def control_plan(mutant: str) -> dict[str, Any]:
    """The plan of a control's cell: each of its crash points (CONTROL_CRASH_POINTS)
    armed from CONTROL_START to the end of the load (a window cut at the run's end
    stays on until the load has stopped), with its action (CONTROL_CRASH_ACTIONS,
    `crash` otherwise)."""
    points = CONTROL_CRASH_POINTS[mutant]
    action = CONTROL_CRASH_ACTIONS.get(mutant, "crash")
    windows = [{"at": f"{CONTROL_START:g}s", "for": "1h", "name": f"control-{index}", "crash_point": point,
                "action": action, "probability": CONTROL_PROBABILITY, "count": CONTROL_COUNT}
               for index, point in enumerate(points)]
    return {"seed": 1, "windows": windows}


def control_plan_path(mutant: str, runs_root: Path) -> Path:
    """`control_plan(mutant)` written (and checked) as a plan file under the runs root."""
    raw = control_plan(mutant)
    path = Path(runs_root) / CONTROL_PLANS_DIR / f"{mutant}.yaml"
    parse_plan(raw, source=str(path))  # a plan the nemesis would refuse is the harness's bug: fail first
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# The smoke job's plan for the control {mutant}: its crash points, armed to the end.\n"
                    + yaml.safe_dump(raw, sort_keys=False))
    return path


def case_plan(case: MutantCase, runs_root: Path) -> Path | None:
    """The plan a control's cell runs under: its own crash points, or the case's plan."""
    if case.mutant in CONTROL_CRASH_POINTS:
        return control_plan_path(case.mutant, runs_root)
    return plan_path(case.plan)


@dataclass
class SmokeStep:
    label: str
    expect_violation: bool
    outcome: RunOutcome | None
    error: str | None
    invariant: str | None = None
    # The lane's stack could not be stopped after this, its lane's last, step: the
    # job's harness failure, whatever the step's verdict.
    cleanup_error: str | None = None
    # The step's runs before `outcome` that lacked its evidence (`lacks_evidence`), each
    # with less load than the next: empty when its first run was enough.
    earlier: tuple[RunOutcome, ...] = ()

    @property
    def caught_by(self) -> list[str]:
        """The invariants that failed in this step's run."""
        check = self.outcome.check if self.outcome is not None else None
        return check.failed if check is not None else []

    @property
    def passed(self) -> bool:
        """A correct run must pass conclusively; a control must fail by its own invariant."""
        if self.outcome is None or self.cleanup_error is not None:
            return False
        if not self.expect_violation:
            return self.outcome.exit_code == EXIT_OK
        return self.outcome.exit_code == EXIT_VIOLATION and (
            self.invariant is None or self.invariant in self.caught_by)


def lacks_evidence(step: SmokeStep) -> bool:
    """A judged step that did not get what it exists for, and more load might give: a
    correct run inconclusive (never one that violated an invariant: that is a failure,
    whatever the load), or a control whose own invariant held. A harness failure or
    a stack that would not stop is not a matter of load."""
    if step.outcome is None or step.cleanup_error is not None or step.passed:
        return False
    return step.expect_violation or step.outcome.exit_code == EXIT_INCONCLUSIVE


# (label, spec, expect a violation, the invariant that must catch it): `smoke_specs`' rows
SmokeSpec = tuple[str, RunSpec, bool, str | None]


def smoke_specs(base: RunSpec) -> list[SmokeSpec]:
    """(label, spec, expect a violation, the invariant that must catch it) per step.
    A base without a stop timeout gets the job's (SMOKE_STOP_TIMEOUT); without a think
    time, the controls get the job's (SMOKE_THINK_TIME) and the correct runs full speed
    (DEFAULT_THINK_TIME); a base's own think time holds for every step but the cells
    whose case names theirs."""
    if base.stop_timeout is None:
        base = replace(base, stop_timeout=SMOKE_STOP_TIMEOUT)
    steps: list[SmokeSpec] = []
    # The correct runs keep full-speed users: their plans' promised paths rest on the
    # request mix of the first seconds (at the job's pace a crash-points run's errors
    # fell on payments, none on order creation, and its recovery path went unexercised).
    correct_pace = base.think_time or DEFAULT_THINK_TIME
    control_pace = base.think_time or SMOKE_THINK_TIME
    for scenario in SCENARIOS:
        spec = replace(base, scenario=scenario, plan=plan_path(SCENARIO_PLANS[scenario]),
                       unsafe_disable=(), app_env=dict(base.app_env), think_time=correct_pace)
        steps.append((f"correct app / {scenario}", spec, False, None))
    for scenario, plan in EXTRA_CORRECT_RUNS:
        spec = replace(base, scenario=scenario, plan=plan_path(plan), unsafe_disable=(),
                       app_env=dict(base.app_env), think_time=correct_pace,
                       app_workers=max(base.app_workers, CRASH_POINTS_APP_WORKERS) if plan == "crash-points"
                       else base.app_workers)
        steps.append((f"correct app / {scenario} / {plan}", spec, False, None))
    for case in MUTANT_CASES:
        spec = replace(base, scenario=case.scenario, plan=case_plan(case, Path(base.runs_root)),
                       unsafe_disable=(case.mutant,), app_env={**base.app_env, **case.app_env},
                       users=min(base.users, case.users or base.users),
                       think_time=case.think_time or control_pace,
                       duration=cell_duration(case.mutant, base.duration),
                       app_workers=min(base.app_workers, CONTROL_APP_WORKERS))
        steps.append((f"mutant {case.mutant} / {case.scenario}", spec, True, case.invariant))
    return steps


# What a step needs of its stack's app (`stack_key`): app workers, consumers, environment.
StackKey = tuple[int, int, tuple[tuple[str, str], ...]]


def smoke(base: RunSpec, *, out: TextIO = sys.stderr, parallel: int = DEFAULT_PARALLEL) -> list[SmokeStep]:
    """Run the smoke job; `base` carries users, duration, seed and the runs root.

    The steps run on `parallel` lanes side by side, each lane on one stack it starts
    (module docstring; compose: `parallel` steps at a time, each on its own stack,
    the longest first); the result keeps the order of `smoke_specs`.
    """
    if base.compose:
        specs = smoke_specs(replace(base, progress=False) if parallel > 1 else base)
        return _smoke_own_stacks(specs, out=out, parallel=parallel)
    with _locust_forkserver(Path(base.runs_root) / LANE_STACKS_DIR, out=out) as forkserver:
        specs = smoke_specs(replace(base, progress=False if parallel > 1 else base.progress,
                                    locust_forkserver=forkserver))
        return _smoke_in_lanes(base, specs, out=out, parallel=parallel)


@contextmanager
def _locust_forkserver(directory: Path, *, out: TextIO) -> Iterator[Path | None]:
    """The socket of a Locust fork server for the job's runs (harness.load.forkserver),
    stopped when the job ends; None (each run starts its own Locust, as before) when
    it would not start, which the job says in one line."""
    server = LocustForkServer(directory)
    try:
        server.start()
    except HarnessError as error:
        print(f"harness smoke: {error}; each run starts its own Locust", file=out)
        yield None
        return
    try:
        yield server.socket_path
    finally:
        server.stop()


def _smoke_in_lanes(base: RunSpec, specs: list[SmokeSpec], *, out: TextIO, parallel: int) -> list[SmokeStep]:
    lanes = plan_lanes([spec for _, spec, _, _ in specs], max(1, parallel))
    lock = threading.Lock()
    stopping = threading.Event()
    done: dict[int, SmokeStep] = {}
    token = secrets.token_hex(3)

    def one_lane(number: int) -> None:
        root = Path(base.runs_root) / LANE_STACKS_DIR / f"lane-{number}"
        try:
            run_lane(root, lanes[number], specs, done, out=out, lock=lock, stopping=stopping,
                     proxy_prefix=f"smoke-{token}-{number}-")
        except BaseException:
            stopping.set()  # an interrupted run or a bug in one lane: the others stop too
            raise

    with ThreadPoolExecutor(max_workers=len(lanes)) as pool:
        futures = [pool.submit(one_lane, number) for number in range(len(lanes))]
        try:
            wait_for_futures(futures)  # not a bare wait: a signal must reach this thread
            for future in futures:
                future.result()
        except BaseException:
            # Ctrl-C (its runs are interrupted in their threads) or a lane's failure: no
            # lane starts another step; each stops its stack on its way out. Waited
            # for in slices, not by the pool's shutdown: a run whose interrupt a
            # finalizer swallowed gets it again from this thread's signal handler.
            stopping.set()
            wait_for_futures(futures, every=True)
            raise
    return [done[index] for index in range(len(specs))]


def stack_key(spec: RunSpec) -> StackKey:
    """What a step needs of its stack's app: two steps with the same key can run one
    after the other on one stack as it is."""
    return spec.app_workers, spec.consumers, tuple(sorted(app_environment(spec).items()))


def step_seconds(spec: RunSpec) -> float:
    """How long a step is expected to take on a stack that is already up (STEP_OVERHEAD_S)."""
    return (spec.duration + STEP_OVERHEAD_S + (MESSAGE_DRAIN_S if spec.scenario == "redelivered_messages" else 0.0)
            + (PLAN_HEAL_S if spec.plan is not None else 0.0))


def plan_lanes(specs: Sequence[RunSpec], lanes: int) -> list[list[int]]:
    """The steps (indices into `specs`) of each of at most `lanes` lanes, in the order
    each lane runs them: the longest first, each on the lane that would finish it
    soonest, counting a restart of the app (RESTART_S) when its configuration is not
    the lane's last one; then each lane's steps of one configuration (the correct
    runs) one after another, so they share its stack without restarts; then moves and
    swaps that shorten the longest lane (`_balanced`). Every step is on exactly one lane."""
    keys = [stack_key(spec) for spec in specs]
    costs = [step_seconds(spec) for spec in specs]
    plans: list[list[int]] = []
    ends: list[float] = []
    last: list[StackKey] = []
    for index in sorted(range(len(specs)), key=lambda index: (-costs[index], index)):
        finish = [end + (0.0 if last[lane] == keys[index] else RESTART_S) for lane, end in enumerate(ends)]
        if len(plans) < lanes:
            finish.append(STACK_START_S)
        lane = min(range(len(finish)), key=lambda candidate: (finish[candidate], candidate))
        if lane == len(plans):
            plans.append([])
            ends.append(0.0)
            last.append(keys[index])
        plans[lane].append(index)
        ends[lane] = finish[lane] + costs[index]
        last[lane] = keys[index]
    return _balanced([_grouped(plan, keys) for plan in plans], keys, costs)


def _grouped(plan: Sequence[int], keys: Sequence[StackKey]) -> list[int]:
    """Within a lane, the steps of one configuration one after another (the order of
    first appearance): a restart per configuration, never one back to an earlier one."""
    first: dict[StackKey, int] = {}
    for position, index in enumerate(plan):
        first.setdefault(keys[index], position)
    position_of = {index: position for position, index in enumerate(plan)}
    return sorted(plan, key=lambda index: (first[keys[index]], position_of[index]))


def lane_seconds(plan: Sequence[int], specs: Sequence[RunSpec]) -> float:
    """How long a lane is expected to take: its stack's start, its steps, a restart
    before each step whose configuration is not the previous one's."""
    return _seconds(plan, [stack_key(spec) for spec in specs], [step_seconds(spec) for spec in specs])


def _seconds(plan: Sequence[int], keys: Sequence[StackKey], costs: Sequence[float]) -> float:
    restarts = sum(1 for before, after in zip(plan, plan[1:], strict=False) if keys[before] != keys[after])
    return STACK_START_S + sum(costs[index] for index in plan) + RESTART_S * restarts


def _balanced(plans: list[list[int]], keys: Sequence[StackKey], costs: Sequence[float],
              rounds: int = 100) -> list[list[int]]:
    """The greedy plan, improved: while moving one step off the longest lane, or
    swapping it with one of another lane, makes both shorter than the longest was,
    do the best such change (a bounded number of rounds)."""
    plans = [list(plan) for plan in plans]
    for _ in range(rounds):
        seconds = [_seconds(plan, keys, costs) for plan in plans]
        worst = max(range(len(plans)), key=lambda lane: (seconds[lane], -lane))
        best: tuple[float, list[int], list[int], int] | None = None
        for other in range(len(plans)):
            if other == worst:
                continue
            for step in plans[worst]:
                for swap in [None, *plans[other]]:
                    shorter = [index for index in plans[worst] if index != step] + ([] if swap is None else [swap])
                    if not shorter:
                        continue
                    longer = [index for index in plans[other] if index != swap] + [step]
                    shorter, longer = _grouped(shorter, keys), _grouped(longer, keys)
                    after = max(_seconds(shorter, keys, costs), _seconds(longer, keys, costs))
                    if after < seconds[worst] - 0.01 and (best is None or after < best[0]):
                        best = (after, shorter, longer, other)
        if best is None:
            break
        _, plans[worst], plans[best[3]], _ = best
    return plans


@contextmanager
def lane_stack(root: Path, spec: RunSpec, *, proxy_prefix: str) -> Iterator[RunningStack]:
    """A stack for a lane, started for `spec` and owned by this process (it stops as
    soon as this process dies, however it dies: its own lifeline); stopped when the
    block ends, however it ends (a stack that will not stop is a StackError)."""
    with Lifeline() as lifeline:
        stack = start_stack(own_stack_settings(spec, root, proxy_prefix=proxy_prefix), lifeline=lifeline)
        assert isinstance(stack, RunningStack)  # a local stack: compose cells never get here
        try:
            yield stack
        finally:
            stack.down()


def run_lane(root: Path, steps: Sequence[int], specs: Sequence[SmokeSpec], done: dict[int, SmokeStep], *,
             out: TextIO, lock: threading.Lock, stopping: threading.Event, proxy_prefix: str = "") -> None:
    """Run `steps` one after another on one stack in `root` (module docstring), each
    step's SmokeStep into `done` under its index; stops at once when `stopping` is set
    (a step not run then is not in `done`)."""
    with ExitStack() as lane:
        stack: RunningStack | None = None
        key: StackKey | None = None
        last: int | None = None
        for index in steps:
            if stopping.is_set():
                break
            label, spec, expect_violation, invariant = specs[index]
            if spec.run_id is None:
                spec = replace(spec, run_id=f"{new_run_id(spec.scenario, spec.unsafe_disable)}-{index:02d}")
            try:
                if stack is None:
                    stack = lane.enter_context(lane_stack(root, spec, proxy_prefix=proxy_prefix))
                elif stack_key(spec) != key:
                    stack.restart_services(app_environment(spec), app_workers=spec.app_workers, flush_data=True)
            except StackError as error:
                message = f"the lane's stack could not be made ready: {error}"
                with lock:
                    print(f"harness smoke: {label} ...", file=out, flush=True)
                    print(f"harness smoke: {label}: harness failure: {message}", file=out, flush=True)
                done[index] = SmokeStep(label, expect_violation, None, message, invariant)
                _drop_stack(lane, done, last)
                stack = None
                continue
            key = stack_key(spec)
            if stopping.is_set():
                # Stopped while the stack was being made ready (a start or a restart is not
                # a run: no Interrupted reaches this thread then): run nothing more.
                break
            done[index] = _step_until_evidence(label, replace(spec, stack_root=stack.root, attach=True),
                                               expect_violation=expect_violation, invariant=invariant,
                                               out=out, lock=lock, stopping=stopping)
            last = index
            if done[index].outcome is None:
                # What it left behind (a backlog, a service down) is nobody's to judge.
                _drop_stack(lane, done, last)
                stack = None
        if stack is not None:
            _drop_stack(lane, done, last)


def _drop_stack(lane: ExitStack, done: dict[int, SmokeStep], last: int | None) -> None:
    """Stop the lane's stack now (its `lane_stack` block); a stack that will not stop
    is reported against the lane's last step (`cleanup_error`)."""
    pending = lane.pop_all()
    try:
        pending.close()
    except StackError as error:
        if last is not None:
            done[last] = replace(done[last], cleanup_error=f"the lane's stack would not stop: {error}")
        else:
            raise


def _smoke_own_stacks(specs: Sequence[SmokeSpec], *, out: TextIO, parallel: int) -> list[SmokeStep]:
    """`parallel` steps at a time, each on a stack of its own, the longest first
    (`step_cost`: the job ends sooner when no long step starts last)."""
    lock = threading.Lock()

    def one(index: int) -> SmokeStep:
        label, spec, expect_violation, invariant = specs[index]
        if spec.run_id is None:
            # Named when it starts, with its step number: two steps of one scenario that
            # start in the same second must not get the same run directory.
            spec = replace(spec, run_id=f"{new_run_id(spec.scenario, spec.unsafe_disable)}-{index:02d}")
        return _step_until_evidence(label, spec, expect_violation=expect_violation, invariant=invariant,
                                    out=out, lock=lock)

    order = sorted(range(len(specs)), key=lambda index: -step_cost(specs[index][1]))
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = {index: pool.submit(one, index) for index in order}
        try:
            wait_for_futures(list(futures.values()))  # as in _smoke_in_lanes
            for future in futures.values():
                if future.done():
                    future.result()  # a step that raised (an interrupt, a bug) raises here, at once
        except BaseException:
            for future in futures.values():
                future.cancel()  # a step not started yet never starts
            wait_for_futures(list(futures.values()), every=True)  # as in _smoke_in_lanes
            raise
        return [futures[index].result() for index in range(len(specs))]


def step_cost(spec: RunSpec) -> int:
    """A rank of how long a step takes (measured: the message layer's runs wait for the
    consumers to drain the stream, runs under a plan wait for what it broke to heal)."""
    return (2 if spec.scenario == "redelivered_messages" else 0) + (1 if spec.plan is not None else 0)


def _step_until_evidence(label: str, spec: RunSpec, *, expect_violation: bool, invariant: str | None,
                         out: TextIO, lock: threading.Lock,
                         stopping: threading.Event | None = None) -> SmokeStep:
    """`_step`, run again with MORE_LOAD_FACTOR times the load while it lacks its
    evidence (`lacks_evidence`), at most MORE_LOAD_RUNS more times, each run under a
    run id of its own (the first's, `-more-N`: its directory sorts after the first's);
    not again once `stopping` is set."""
    earlier: list[RunOutcome] = []
    first_id = spec.run_id
    while True:
        step = _step(label, spec, expect_violation=expect_violation, invariant=invariant, out=out, lock=lock)
        if (step.outcome is None or not lacks_evidence(step) or len(earlier) == MORE_LOAD_RUNS
                or (stopping is not None and stopping.is_set())):
            return replace(step, earlier=tuple(earlier))
        earlier.append(step.outcome)
        spec = replace(spec, duration=spec.duration * MORE_LOAD_FACTOR,
                       run_id=None if first_id is None else f"{first_id}-more-{len(earlier)}")
        with lock:
            print(f"harness smoke: {label}: again with {spec.duration:g} s of load "
                  f"({len(earlier)} of at most {MORE_LOAD_RUNS} more runs)", file=out, flush=True)


def _step(label: str, spec: RunSpec, *, expect_violation: bool, invariant: str | None,
          out: TextIO, lock: threading.Lock) -> SmokeStep:
    with lock:
        print(f"harness smoke: {label} ...", file=out, flush=True)
    try:
        outcome = run(spec, out=_quiet() if not spec.progress else out)
    except HarnessError as error:
        with lock:
            print(f"harness smoke: {label}: harness failure: {error}", file=out, flush=True)
        return SmokeStep(label, expect_violation, None, str(error), invariant)
    step = SmokeStep(label, expect_violation, outcome, None, invariant)
    if step.passed:
        verdict = "ok"
    elif expect_violation and outcome.exit_code == EXIT_VIOLATION:
        verdict = f"CAUGHT BY THE WRONG INVARIANT (wanted {invariant})"
    else:
        verdict = ("NOT CAUGHT" if expect_violation
                   else "NOT CONCLUSIVE" if outcome.exit_code == EXIT_INCONCLUSIVE else "FAILED")
    with lock:
        print(f"harness smoke: {label}: {verdict}: {outcome.summary}", file=out, flush=True)
    return step


def _quiet() -> TextIO:
    """A text sink for runs side by side, whose progress lines would interleave (a
    run's few lines of progress, dropped with it)."""
    return io.StringIO()


def smoke_exit_code(steps: Sequence[SmokeStep]) -> int:
    if any(step.outcome is None or step.cleanup_error is not None for step in steps):
        return EXIT_HARNESS
    return EXIT_OK if all(step.passed for step in steps) else EXIT_VIOLATION


_CASES = {case.mutant: case for case in MUTANT_CASES}


def matrix(
    base: RunSpec,
    *,
    mutants: Sequence[str] = ("none", *MUTANTS),
    scenarios: Sequence[str] = SCENARIOS,
    out: TextIO = sys.stderr,
    on_cell: Callable[[MatrixCell], None] | None = None,
) -> list[MatrixCell]:
    """Every mutant (`none` = the correct app) against every scenario, with no plan
    except where a layer can only be caught under its fault (the naive inbox)."""
    for mutant in mutants:
        if mutant != "none" and mutant not in MUTANTS:
            raise HarnessError(f"unknown mutant {mutant!r}; choose from none, {', '.join(MUTANTS)}")
    for scenario in scenarios:
        if scenario not in SCENARIOS:
            raise HarnessError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
    cells: list[MatrixCell] = []
    for mutant in mutants:
        for scenario in scenarios:
            case = _CASES.get(mutant)
            case_env = case.app_env if case is not None else {}
            # A control that only shows under its fault runs under that fault's plan
            # (its crash points, or the case's plan) in its own scenario and in mixed.
            plan = case_plan(case, Path(base.runs_root)) if case is not None and (
                scenario == case.scenario or scenario == "mixed") else None
            spec = replace(
                base, scenario=scenario, plan=plan,
                unsafe_disable=() if mutant == "none" else (mutant,),
                app_env={**base.app_env, **case_env},
                users=min(base.users, case.users) if case is not None and case.users else base.users,
            )
            print(f"harness matrix: {mutant} × {scenario} ...", file=out, flush=True)
            try:
                outcome = run(spec, out=out)
            except HarnessError as error:
                cell = MatrixCell(mutant, scenario, False, [], "", str(error))
            else:
                failed = outcome.check.failed
                cell = MatrixCell(mutant, scenario, bool(failed), failed, str(outcome.run_dir),
                                  inconclusive=outcome.exit_code == EXIT_INCONCLUSIVE,
                                  report=str(RunDir(outcome.run_dir).report))
            cells.append(cell)
            if on_cell is not None:
                on_cell(cell)
    return cells


def matrix_exit_code(cells: Sequence[MatrixCell]) -> int:
    """0 when the correct app passes everywhere (conclusively) and every mutant is caught
    somewhere; 1 for a false alarm or a mutant caught nowhere; 3 when a correct-app cell
    was inconclusive; 2 for a harness error."""
    if any(cell.error for cell in cells):
        return EXIT_HARNESS
    false_alarms = [c for c in cells if c.mutant == "none" and c.caught]
    missed = {c.mutant for c in cells if c.mutant != "none"} - {
        c.mutant for c in cells if c.mutant != "none" and c.caught
    }
    if false_alarms or missed:
        return EXIT_VIOLATION
    # a correct-app cell that proved too little is not a green matrix either
    return EXIT_INCONCLUSIVE if any(c.mutant == "none" and c.inconclusive for c in cells) else EXIT_OK


def write_matrix(cells: Sequence[MatrixCell], runs_root: Path) -> Path:
    path = Path(runs_root) / "matrix.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_matrix_report(path, cells)
    return path


__all__ = [
    "EXTRA_CORRECT_RUNS", "MUTANT_CASES", "SCENARIO_PLANS", "SMOKE_STOP_TIMEOUT", "SMOKE_THINK_TIME", "MutantCase",
    "SmokeStep", "control_plan", "lacks_evidence", "format_matrix_table", "matrix", "matrix_exit_code", "smoke", "smoke_exit_code", "write_matrix",
]
