"""The verdict commands of the CLI: `harness run`, `check`, `smoke` and `matrix`
(and `worker` and `swarm begin`, which feed them).

Each handler returns the process exit code from `harness.exit_codes`: 0 every invariant
held and the run exercised what it promised, 1 a violation was found, 2 the harness
failed (raised as `HarnessError`, translated by the CLI), 3 inconclusive: nothing was
violated, but a promised protective path was never exercised or too little was
acknowledged.

Every input is checked before anything starts: option values by their argparse types
(a plan is parsed, a duration must be one), the whole run by `RunSpec.validate`; so a
bad command line is one line on stderr, exit 2, and no run directory.

With `--json`, stdout carries exactly one JSON document, the verdict (shapes in
docs/cli.md, as the TypedDicts below); everything meant for a person, the progress
line and the summary included, goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stdout
from dataclasses import replace
from pathlib import Path
from typing import Any, Final, Literal, NoReturn, TextIO, TypedDict

from harness.bundled import bundled_plan_names, locustfile
from harness.catalog import DEFAULT_MIN_ACKNOWLEDGED, MUTANTS, SCENARIOS
from harness.cli.argtypes import (
    Subparsers,
    add_root_option,
    duration,
    non_negative_int,
    positive_duration,
    positive_int,
    think_time,
)
from harness.cli.argtypes import plan as plan_argument
from harness.errors import HarnessError
from harness.exit_codes import EXIT_HARNESS, EXIT_OK, VERDICT_EXIT_CODES
from harness.load.locust_process import DEFAULT_STOP_TIMEOUT
from harness.load.settings import DEFAULT_THINK_TIME, format_think_time
from harness.names import DEFAULT_STACK_ROOT
from harness.report.matrix import MatrixCell
from harness.run.rundir import RunDir
from harness.run.runner import RunOutcome, RunSpec, check_given_run, run
from harness.run.smoke import (
    DEFAULT_PARALLEL,
    SMOKE_STOP_TIMEOUT,
    SMOKE_THINK_TIME,
    SmokeStep,
    format_matrix_table,
    matrix,
    matrix_exit_code,
    smoke,
    smoke_exit_code,
    write_matrix,
)
from harness.stack.settings import target_app_env

MATRIX_NONE: Final = "none"  # the correct app, as a row of the matrix
SCENARIO_HELP: Final = "one of " + ", ".join(SCENARIOS) + " (docs/scenarios.md)"

Verdict = Literal["pass", "fail", "inconclusive", "error"]
RUN_VERDICTS: Final[tuple[Verdict, ...]] = ("pass", "fail", "inconclusive")


# --- the --json documents (docs/cli.md) -------------------------------------------------

class InvariantEntry(TypedDict):
    name: str
    passed: bool
    violation_count: int


class ReportPaths(TypedDict):
    result_json: str | None
    junit_xml: str | None
    report_html: str | None


class RunDocument(TypedDict):
    """One checked run: `harness run --json`, `check --json`, and each smoke step's run."""

    command: str
    verdict: Verdict
    exit_code: int
    run_dir: str
    scenario: str | None
    unsafe_disable: list[str]
    invariants: list[InvariantEntry]
    inconclusive_reasons: list[str]
    interrupted: dict[str, Any] | None
    reports: ReportPaths
    summary: str


class SmokeStepEntry(TypedDict):
    label: str
    expect_violation: bool
    invariant: str | None
    passed: bool
    caught_by: list[str]
    error: str | None
    run: RunDocument | None
    # The step's runs before `run` that lacked its evidence, with less load (oldest first).
    earlier_runs: list[RunDocument]


class SmokeDocument(TypedDict):
    command: str
    verdict: Verdict
    exit_code: int
    steps: list[SmokeStepEntry]


class MatrixCellEntry(TypedDict):
    mutant: str
    scenario: str
    caught: bool
    invariants: list[str]
    inconclusive: bool
    error: str | None
    run_dir: str | None
    result_json: str | None


class MatrixDocument(TypedDict):
    command: str
    verdict: Verdict
    exit_code: int
    matrix_html: str
    cells: list[MatrixCellEntry]


class ErrorDocument(TypedDict):
    """A command that failed after its arguments were accepted (exit 2)."""

    command: str
    verdict: Verdict
    exit_code: int
    error: str


def verdict_for(exit_code: int) -> Verdict:
    """The verdict word of an exit code (anything but 0, 1 and 3 is a harness error)."""
    for verdict in RUN_VERDICTS:
        if VERDICT_EXIT_CODES[verdict] == exit_code:
            return verdict
    return "error"


def _existing(path: Path) -> str | None:
    return str(path) if path.is_file() else None


def _report_paths(run: RunDir) -> ReportPaths:
    return ReportPaths(result_json=_existing(run.result), junit_xml=_existing(run.junit),
                       report_html=_existing(run.report))


def run_document(command: str, outcome: RunOutcome) -> RunDocument:
    check = outcome.check
    invariants = [InvariantEntry(name=invariant.name, passed=invariant.passed,
                                 violation_count=invariant.violation_count)
                  for invariant in check.invariants]
    return RunDocument(
        command=command, verdict=verdict_for(outcome.exit_code), exit_code=outcome.exit_code,
        run_dir=str(outcome.run_dir), scenario=check.scenario or None,
        unsafe_disable=list(check.unsafe_disable), invariants=invariants,
        inconclusive_reasons=list(check.inconclusive_reasons),
        interrupted=check.interrupted.to_json() if check.interrupted else None,
        reports=_report_paths(RunDir(Path(outcome.run_dir))), summary=outcome.summary,
    )


def smoke_document(steps: Sequence[SmokeStep], exit_code: int) -> SmokeDocument:
    entries = [SmokeStepEntry(label=step.label, expect_violation=step.expect_violation,
                              invariant=step.invariant, passed=step.passed, caught_by=step.caught_by,
                              error=step.error,
                              run=run_document("smoke", step.outcome) if step.outcome is not None else None,
                              earlier_runs=[run_document("smoke", outcome) for outcome in step.earlier])
               for step in steps]
    return SmokeDocument(command="smoke", verdict=verdict_for(exit_code), exit_code=exit_code, steps=entries)


def matrix_document(cells: Sequence[MatrixCell], exit_code: int, matrix_html: Path) -> MatrixDocument:
    entries = []
    for cell in cells:
        entries.append(MatrixCellEntry(
            mutant=cell.mutant, scenario=cell.scenario, caught=cell.caught, invariants=list(cell.invariants),
            inconclusive=cell.inconclusive, error=cell.error, run_dir=cell.run_dir or None,
            result_json=_existing(RunDir(Path(cell.run_dir)).result) if cell.run_dir else None))
    return MatrixDocument(command="matrix", verdict=verdict_for(exit_code), exit_code=exit_code,
                          matrix_html=str(matrix_html), cells=entries)


@contextmanager
def _stdout_for_people(as_json: bool) -> Iterator[TextIO]:
    """With --json: everything printed (by this process or a child it starts) goes to
    stderr; the stream yielded is the real stdout, for the one JSON document."""
    real = sys.stdout
    if not as_json:
        yield real
        return
    real.flush()
    # Children inherit descriptors, not `sys.stdout`: descriptor 1 is pointed at stderr too.
    saved = os.dup(real.fileno()) if _has_fd(real) and _has_fd(sys.stderr) else None
    try:
        if saved is not None:
            os.dup2(sys.stderr.fileno(), real.fileno())
        with redirect_stdout(sys.stderr):
            yield real
    finally:
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, real.fileno())
            os.close(saved)


def _has_fd(stream: TextIO) -> bool:
    # pytest's capsys and other in-memory streams have no descriptor to move.
    try:
        stream.fileno()
    except (OSError, ValueError):
        return False
    return True


def _emit(stream: TextIO, document: object) -> None:
    stream.write(json.dumps(document, indent=2) + "\n")
    stream.flush()


def _verdict_command(command: str, body: Callable[[argparse.Namespace, TextIO], tuple[int, object]]
                     ) -> Callable[[argparse.Namespace], int]:
    """A handler that prints `body`'s document on stdout with --json (and an error
    document when the harness fails), and otherwise lets `body` talk to the terminal."""

    def handler(args: argparse.Namespace) -> int:
        as_json = bool(getattr(args, "json", False))
        failure: HarnessError | None = None
        with _stdout_for_people(as_json) as stdout:
            try:
                code, document = body(args, sys.stdout)
            except HarnessError as error:
                if not as_json:
                    raise
                failure = error
        # Printed once stdout is stdout again.
        if failure is not None:
            _emit(stdout, ErrorDocument(command=command, verdict="error", exit_code=EXIT_HARNESS,
                                        error=" ".join(str(failure).split())))
            raise failure
        if as_json:
            _emit(stdout, document)
        return code

    return handler


# --- option types ------------------------------------------------------------------

def _comma_list(text: str) -> list[str]:
    return [value.strip() for value in text.split(",") if value.strip()]


def _mutants(text: str) -> tuple[str, ...]:
    values = tuple(_comma_list(text))
    unknown = [value for value in values if value not in MUTANTS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown layer {', '.join(unknown)}; choose from {', '.join(MUTANTS)}"
        )
    return values


def _matrix_mutants(text: str) -> list[str]:
    values = _comma_list(text)
    unknown = [value for value in values if value != MATRIX_NONE and value not in MUTANTS]
    if unknown or not values:
        raise argparse.ArgumentTypeError(
            f"unknown mutant {', '.join(unknown) or repr(text)}; choose from {MATRIX_NONE}, {', '.join(MUTANTS)}")
    return values


def _scenario_list(text: str) -> list[str]:
    values = _comma_list(text)
    unknown = [value for value in values if value not in SCENARIOS]
    if unknown or not values:
        raise argparse.ArgumentTypeError(
            f"unknown scenario {', '.join(unknown) or repr(text)}; choose from {', '.join(SCENARIOS)}")
    return values


# --- the parsers ---------------------------------------------------------------------

def _add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="the verdict as one JSON document on stdout (docs/cli.md); progress on stderr")


def _add_load_options(parser: argparse.ArgumentParser, *, users: int, default_duration: str,
                      think_time_default: str = format_think_time(DEFAULT_THINK_TIME),
                      stop_timeout_default: str = f"{DEFAULT_STOP_TIMEOUT:g}s") -> None:
    """The load's options; `think_time_default` and `stop_timeout_default` are what the
    help names: the option itself defaults to None, the command's own (a RunSpec's)."""
    parser.add_argument("--users", type=positive_int, default=users, help="Locust users")
    parser.add_argument("--think-time", type=think_time, default=None, metavar="LOW-HIGH",
                        help=f"seconds each user waits between two tasks, drawn from LOW-HIGH, or one "
                             f"duration (default {think_time_default})")
    parser.add_argument("--stop-timeout", type=duration, default=None, metavar="DURATION",
                        help="when the load ends, how long the users may finish the task they are in "
                             "before Locust stops them (their open operations count as indeterminate) "
                             f"(default {stop_timeout_default})")
    parser.add_argument("--duration", type=positive_duration, default=duration(default_duration),
                        help="load duration")
    parser.add_argument("--seed", type=int, default=7, help="seed for the users and the fault plan")
    parser.add_argument("--workers", "--processes", dest="processes", type=non_negative_int, default=1,
                        metavar="N", help="local Locust worker processes: with N > 1 a Locust master and N "
                                          "`locust --worker` processes, the histories sent to the master; "
                                          "1 is one standalone process")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), metavar="DIR",
                        help="where run directories go")
    add_root_option(parser, help="state directory of a stack started by `harness up`")
    parser.add_argument("--app-workers", type=positive_int, default=4, metavar="N",
                        help="gunicorn workers of a stack it starts")
    parser.add_argument("--consumers", type=positive_int, default=2, metavar="N",
                        help="consumers of a stack it starts")
    parser.add_argument("--drain-timeout", type=duration, default=30.0,
                        help="how long to wait for the consumers to drain the stream")
    parser.add_argument("--compose", action="store_true", help="use the docker compose services")
    parser.add_argument("--min-acknowledged", type=non_negative_int, default=DEFAULT_MIN_ACKNOWLEDGED, metavar="N",
                        help="fewer ok operations than this make the run inconclusive")
    _add_json_option(parser)


def add_parsers(subparsers: Subparsers) -> None:
    run_parser = subparsers.add_parser(
        "run", help="run one scenario under a fault plan and check it",
        description="Start (or use) the stack, swarm it, heal, drain, check, report.",
    )
    run_parser.add_argument("scenario", choices=SCENARIOS, metavar="SCENARIO", help=SCENARIO_HELP)
    run_parser.add_argument("--plan", type=plan_argument, metavar="NAME|FILE",
                            help="fault plan: a bundled name (" + ", ".join(bundled_plan_names())
                                 + ") or a YAML file (default: no faults)")
    run_parser.add_argument("--unsafe-disable", type=_mutants, default=(), metavar="LAYER[,LAYER]",
                            help="negative control: comma list of " + ", ".join(MUTANTS))
    _add_load_options(run_parser, users=20, default_duration="30s")
    run_parser.add_argument("--scale-workers", type=positive_int, default=0, metavar="N",
                            help="with --compose: the load on the compose Locust master and N "
                                 "locust-worker containers instead of Locust on the host")
    run_parser.add_argument("--remote-workers", type=non_negative_int, default=0, metavar="M",
                            help="wait for M more Locust workers that join from other machines "
                                 "(`harness worker SCENARIO --master HOST:PORT`) before the load starts")
    run_parser.add_argument("--master-bind", metavar="HOST:PORT",
                            help="where the Locust master listens for workers (default with "
                                 "--remote-workers 0.0.0.0:5557, else 127.0.0.1 on a free port)")
    run_parser.add_argument("--workers-wait", type=duration, default=120.0,
                            help="how long the master waits for every worker to join")
    run_parser.set_defaults(handler=_verdict_command("run", run_body))

    worker_parser = subparsers.add_parser(
        "worker", help="join a run as Locust worker(s): `locust --worker` with the scenario's locustfile",
        description="Run Locust worker process(es) for SCENARIO that connect to a master (a `harness run "
                    "--remote-workers M` on another machine, or any `locust --master`). The settings and "
                    "the target host come from the master; the histories go back to it.")
    worker_parser.add_argument("scenario", choices=SCENARIOS, metavar="SCENARIO", help=SCENARIO_HELP)
    worker_parser.add_argument("--master", required=True, metavar="HOST[:PORT]",
                               help="the master's address (port default 5557)")
    worker_parser.add_argument("--processes", type=positive_int, default=1, metavar="N",
                               help="worker processes on this machine")
    worker_parser.set_defaults(handler=handle_worker)

    check_parser = subparsers.add_parser(
        "check", help="re-check a saved run and rewrite its reports; --stack: judge a swarm run by hand",
        description="Re-check RUN_DIR. With --stack, first finish a swarm that ran by hand against the "
                    "running stack (begun with `harness swarm begin`): heal every fault, drain, quiesce, "
                    "export, final reads, then check and report into its run directory.")
    check_parser.add_argument("run_dir", type=Path, nargs="?",
                              help="run directory (with --stack: default the swarm begun last on the stack)")
    check_parser.add_argument("--stack", action="store_true",
                              help="finish and judge a swarm against the running stack (see `harness swarm`)")
    add_root_option(check_parser, help="with --stack: state directory of the stack")
    check_parser.add_argument("--drain-timeout", type=duration, default=30.0,
                              help="with --stack: how long the consumers may take to drain")
    check_parser.add_argument("--whole-state", action="store_true",
                              help="with --stack, for a swarm never begun (no baseline): judge the stack's "
                                   "whole state as the swarm's; right only on a stack that served nothing else")
    check_parser.add_argument("--scenario", choices=SCENARIOS, metavar="SCENARIO",
                              help="with --whole-state: the swarm's scenario, " + SCENARIO_HELP)
    _add_json_option(check_parser)
    check_parser.set_defaults(handler=_verdict_command("check", check_body))

    swarm_parser = subparsers.add_parser(
        "swarm", help="begin a swarm you run yourself (locust -f ..., the web UI); judge it with check --stack")
    swarm_commands = swarm_parser.add_subparsers(dest="swarm_command", required=True, metavar="ACTION")
    begin_parser = swarm_commands.add_parser(
        "begin", help="a new run directory with the stack's baseline export, before the load")
    begin_parser.add_argument("scenario", choices=SCENARIOS, metavar="SCENARIO", help=SCENARIO_HELP)
    begin_parser.add_argument("--plan", type=plan_argument, metavar="NAME|FILE",
                              help="a fault plan whose promised paths the swarm must exercise "
                                   "(default: none promised beyond the scenario's)")
    add_root_option(begin_parser)
    begin_parser.add_argument("--runs-dir", type=Path, default=Path("runs"), metavar="DIR",
                              help="where run directories go")
    begin_parser.add_argument("--min-acknowledged", type=non_negative_int, default=DEFAULT_MIN_ACKNOWLEDGED,
                              metavar="N", help="fewer ok operations make the verdict inconclusive")
    begin_parser.set_defaults(handler=handle_swarm_begin)

    smoke_parser = subparsers.add_parser(
        "smoke", help="the CI job: every scenario on the correct app, every mutant caught",
    )
    _add_load_options(smoke_parser, users=10, default_duration="8s",
                      think_time_default=f"{format_think_time(SMOKE_THINK_TIME)} for the controls, "
                                         f"{format_think_time(DEFAULT_THINK_TIME)} for the correct runs",
                      stop_timeout_default=f"{SMOKE_STOP_TIMEOUT:g}s")
    smoke_parser.add_argument("--parallel", type=positive_int, default=DEFAULT_PARALLEL, metavar="N",
                              help="lanes side by side, each one stack its runs share (compose: runs "
                                   "side by side, each on its own stack)")
    smoke_parser.set_defaults(handler=_verdict_command("smoke", smoke_body))

    matrix_parser = subparsers.add_parser("matrix", help="every mutant against every scenario")
    matrix_parser.add_argument("--mutants", type=_matrix_mutants, default=[MATRIX_NONE, *MUTANTS],
                               metavar="MUTANT[,MUTANT]",
                               help=f"comma list of {MATRIX_NONE} (the correct app) and " + ", ".join(MUTANTS)
                                    + f" (default: {MATRIX_NONE} and every mutant)")
    matrix_parser.add_argument("--scenarios", type=_scenario_list, default=list(SCENARIOS),
                               metavar="SCENARIO[,SCENARIO]",
                               help="comma list of " + ", ".join(SCENARIOS) + " (default: all)")
    _add_load_options(matrix_parser, users=10, default_duration="8s")
    matrix_parser.set_defaults(handler=_verdict_command("matrix", matrix_body))


# --- the handlers --------------------------------------------------------------------

def _spec(args: argparse.Namespace, scenario: str) -> RunSpec:
    return RunSpec(
        scenario=scenario,
        users=args.users,
        duration=args.duration,
        think_time=args.think_time,
        stop_timeout=args.stop_timeout,
        plan=getattr(args, "plan", None),
        seed=args.seed,
        processes=args.processes,
        compose=args.compose,
        scale_workers=getattr(args, "scale_workers", 0),
        remote_workers=getattr(args, "remote_workers", 0),
        master_bind=getattr(args, "master_bind", None),
        workers_wait=getattr(args, "workers_wait", 120.0),
        unsafe_disable=tuple(getattr(args, "unsafe_disable", ())),
        runs_root=args.runs_dir,
        stack_root=args.root,
        app_workers=args.app_workers,
        consumers=args.consumers,
        drain_timeout=args.drain_timeout,
        min_acknowledged=args.min_acknowledged,
    )


def check_app_environment(environ: Mapping[str, str]) -> None:
    """The TARGET_APP_* settings a started stack would pass to the app, checked now: a
    bad one is one line before the run starts, not an app that will not boot in it."""
    from target_app.errors import ConfigError
    from target_app.settings import Settings

    try:
        Settings.from_env(target_app_env(environ))
    except ConfigError as error:
        raise HarnessError(f"environment: {error}") from None


def _validated(spec: RunSpec) -> RunSpec:
    """The spec, checked as a whole (option combinations and the app's environment)
    before any directory exists."""
    spec.validate()
    check_app_environment(os.environ)
    return spec


def run_body(args: argparse.Namespace, out: TextIO) -> tuple[int, RunDocument]:
    outcome = run(_validated(_spec(args, args.scenario)))
    print(outcome.summary, file=out)
    return outcome.exit_code, run_document("run", outcome)


def handle_worker(args: argparse.Namespace) -> NoReturn:
    """Become `locust --worker` (exec: signals and the exit code are Locust's own)."""
    from harness.load.locust_process import locustfile_for, parse_master_address

    host, port = parse_master_address(args.master)
    # Deliberate duplicates get 4xx answers: data for the checker, not a failed worker.
    argv = [sys.executable, "-m", "locust", "-f", str(locustfile_for(args.scenario)), "--worker",
            "--master-host", host, "--master-port", str(port), "--exit-code-on-error", "0"]
    if args.processes > 1:
        argv += ["--processes", str(args.processes)]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, argv)


def check_body(args: argparse.Namespace, out: TextIO) -> tuple[int, RunDocument]:
    if args.stack:
        outcome = _check_stack(args)
    else:
        if args.run_dir is None:
            raise HarnessError("check: give a run directory, or --stack to judge a swarm on the running stack")
        if not Path(args.run_dir).is_dir():
            raise HarnessError(f"{args.run_dir} is not a run directory")
        outcome = check_given_run(args.run_dir)
    print(outcome.summary, file=out)
    return outcome.exit_code, run_document("check", outcome)


def _check_stack(args: argparse.Namespace) -> RunOutcome:
    from harness.stack.local import open_stack
    from harness.webui.session import adopt_swarm, current_swarm, finish_swarm

    stack = open_stack(args.root)
    if stack is None:
        raise HarnessError(f"no stack is running in {args.root}; the swarm is judged on its running stack")
    run_dir = args.run_dir or current_swarm(stack)
    if run_dir is None:
        raise HarnessError(f"no swarm was begun on the stack in {args.root}; "
                           "run `harness swarm begin SCENARIO` before the load")
    if not Path(run_dir).is_dir():
        raise HarnessError(f"{run_dir} is not a run directory")
    if args.whole_state:
        if args.scenario is None or args.run_dir is None:
            raise HarnessError("check --stack --whole-state needs the swarm's directory and --scenario")
        run_dir = adopt_swarm(stack, Path(run_dir), args.scenario)
    return finish_swarm(stack, Path(run_dir), drain_timeout=args.drain_timeout)


def handle_swarm_begin(args: argparse.Namespace) -> int:
    from harness.stack.local import open_stack
    from harness.webui.session import begin_swarm

    stack = open_stack(args.root)
    if stack is None:
        raise HarnessError(f"no stack is running in {args.root}; start one with `harness up`")
    run_dir = begin_swarm(stack, args.runs_dir, args.scenario, plan=args.plan,
                          min_acknowledged=args.min_acknowledged)
    histories = RunDir(run_dir).histories.resolve()
    own_root = args.root != DEFAULT_STACK_ROOT
    print(f"swarm begun: {run_dir} (baseline saved)")
    print("run the load, recording into its histories/, e.g.:")
    root_option = f" --harness-root {args.root}" if own_root else ""
    print(f"  locust -f {locustfile(args.scenario)} --harness-history-dir {histories}{root_option}")
    print("then judge it (heal, drain, export, check, report):")
    print(f"  harness check --stack{f' --root {args.root}' if own_root else ''}")
    return EXIT_OK


def smoke_body(args: argparse.Namespace, out: TextIO) -> tuple[int, SmokeDocument]:
    # The smoke job starts the stacks it runs on (its lanes'), so mutants never see a
    # state they did not make; a stack left by `harness up` is not used.
    base = _isolated(_validated(_spec(args, SCENARIOS[0])))
    steps = smoke(base, parallel=args.parallel)
    for step in steps:
        mark = "ok  " if step.passed else "FAIL"
        detail = step.error or (step.outcome.summary if step.outcome else "")
        if step.earlier:
            detail += f" (on its run {len(step.earlier) + 1}: {len(step.earlier)} with less load lacked the evidence)"
        print(f"{mark} {step.label}: {detail}", file=out)
    code = smoke_exit_code(steps)
    print("smoke: PASS" if code == EXIT_OK else f"smoke: FAIL (exit {code})", file=out)
    return code, smoke_document(steps, code)


def matrix_body(args: argparse.Namespace, out: TextIO) -> tuple[int, MatrixDocument]:
    base = _isolated(_validated(_spec(args, args.scenarios[0])))
    cells = matrix(base, mutants=args.mutants, scenarios=args.scenarios)
    print(format_matrix_table(cells), file=out)
    path = write_matrix(cells, args.runs_dir)
    print(f"matrix report: {path}", file=out)
    code = matrix_exit_code(cells)
    return code, matrix_document(cells, code, path)


def _isolated(spec: RunSpec) -> RunSpec:
    return replace(spec, attach=False)
