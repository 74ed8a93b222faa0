"""The verdict commands of the CLI: `harness run`, `check`, `smoke` and `matrix`.

Each handler returns the process exit code: 0 every invariant held and the run
exercised what it promised, 1 a violation was found, 2 the harness failed (raised
as `HarnessError`, translated by the CLI), 3 inconclusive: nothing was violated,
but a promised protective path was never exercised or too little was acknowledged.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from harness.bundled import bundled_plan_names
from harness.catalog import DEFAULT_MIN_ACKNOWLEDGED, MUTANTS, SCENARIOS
from harness.cli.argtypes import add_root_option, duration, non_negative_int, positive_int
from harness.cli.argtypes import plan as plan_argument
from harness.errors import HarnessError
from harness.run.runner import RunSpec, check_saved_run, run
from harness.run.smoke import (
    DEFAULT_PARALLEL,
    format_matrix_table,
    matrix,
    matrix_exit_code,
    smoke,
    smoke_exit_code,
    write_matrix,
)


def _mutants(text: str) -> tuple[str, ...]:
    values = tuple(value.strip() for value in text.split(",") if value.strip())
    unknown = [value for value in values if value not in MUTANTS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown layer {', '.join(unknown)}; choose from {', '.join(MUTANTS)}"
        )
    return values


def _add_load_options(parser: argparse.ArgumentParser, *, users: int, default_duration: str) -> None:
    parser.add_argument("--users", type=positive_int, default=users, help=f"Locust users (default {users})")
    parser.add_argument("--duration", type=duration, default=duration(default_duration),
                        help=f"load duration, e.g. 30s, 2m, 1m30s (default {default_duration})")
    parser.add_argument("--seed", type=int, default=7, help="seed for the users and the fault plan")
    parser.add_argument("--workers", "--processes", dest="processes", type=non_negative_int, default=1,
                        metavar="N", help="local Locust worker processes: with N > 1 a Locust master and N "
                                          "`locust --worker` processes, the histories sent to the master "
                                          "(default 1: one standalone process)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where run directories go")
    add_root_option(parser, help="state directory of a stack started by `harness up`")
    parser.add_argument("--app-workers", type=positive_int, default=4, help="gunicorn workers of a stack it starts")
    parser.add_argument("--consumers", type=positive_int, default=2, help="consumers of a stack it starts")
    parser.add_argument("--drain-timeout", type=duration, default=30.0,
                        help="how long to wait for the consumers to drain the stream (default 30s)")
    parser.add_argument("--compose", action="store_true", help="use the docker compose services")
    parser.add_argument("--min-acknowledged", type=non_negative_int, default=DEFAULT_MIN_ACKNOWLEDGED,
                        help="fewer ok operations than this make the run inconclusive "
                             f"(default {DEFAULT_MIN_ACKNOWLEDGED})")


def add_parsers(subparsers: argparse._SubParsersAction) -> None:
    run_parser = subparsers.add_parser(
        "run", help="run one scenario under a fault plan and check it",
        description="Start (or use) the stack, swarm it, heal, drain, check, report.",
    )
    run_parser.add_argument("scenario", choices=SCENARIOS)
    run_parser.add_argument("--plan", type=plan_argument, metavar="NAME|FILE",
                            help="fault plan: a bundled name (" + ", ".join(bundled_plan_names()) + ") or a YAML file")
    run_parser.add_argument("--unsafe-disable", type=_mutants, default=(),
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
                            help="how long the master waits for every worker to join (default 2m)")
    run_parser.set_defaults(handler=handle_run)

    worker_parser = subparsers.add_parser(
        "worker", help="join a run as Locust worker(s): `locust --worker` with the scenario's locustfile",
        description="Run Locust worker process(es) for SCENARIO that connect to a master (a `harness run "
                    "--remote-workers M` on another machine, or any `locust --master`). The settings and "
                    "the target host come from the master; the histories go back to it.")
    worker_parser.add_argument("scenario", choices=SCENARIOS)
    worker_parser.add_argument("--master", required=True, metavar="HOST[:PORT]",
                               help="the master's address (port default 5557)")
    worker_parser.add_argument("--processes", type=positive_int, default=1,
                               help="worker processes on this machine (default 1)")
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
                              help="with --stack: how long the consumers may take to drain (default 30s)")
    check_parser.add_argument("--whole-state", action="store_true",
                              help="with --stack, for a swarm never begun (no baseline): judge the stack's "
                                   "whole state as the swarm's; right only on a stack that served nothing else")
    check_parser.add_argument("--scenario", choices=SCENARIOS, help="with --whole-state: the swarm's scenario")
    check_parser.set_defaults(handler=handle_check)

    swarm_parser = subparsers.add_parser(
        "swarm", help="begin a swarm you run yourself (locust -f ..., the web UI); judge it with check --stack")
    swarm_commands = swarm_parser.add_subparsers(dest="swarm_command", required=True)
    begin_parser = swarm_commands.add_parser(
        "begin", help="a new run directory with the stack's baseline export, before the load")
    begin_parser.add_argument("scenario", choices=SCENARIOS)
    begin_parser.add_argument("--plan", type=Path, help="a fault plan whose promised paths the swarm must exercise")
    add_root_option(begin_parser)
    begin_parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where run directories go")
    begin_parser.add_argument("--min-acknowledged", type=non_negative_int, default=DEFAULT_MIN_ACKNOWLEDGED,
                              help=f"fewer ok operations make the verdict inconclusive (default {DEFAULT_MIN_ACKNOWLEDGED})")
    begin_parser.set_defaults(handler=handle_swarm_begin)

    smoke_parser = subparsers.add_parser(
        "smoke", help="the CI job: every scenario on the correct app, every mutant caught",
    )
    _add_load_options(smoke_parser, users=10, default_duration="8s")
    smoke_parser.add_argument("--parallel", type=positive_int, default=DEFAULT_PARALLEL,
                              help=f"runs side by side, each on its own stack (default {DEFAULT_PARALLEL})")
    smoke_parser.set_defaults(handler=handle_smoke)

    matrix_parser = subparsers.add_parser("matrix", help="every mutant against every scenario")
    matrix_parser.add_argument("--mutants", default="none," + ",".join(MUTANTS),
                               help="comma list (default: none and every mutant)")
    matrix_parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma list (default: all)")
    _add_load_options(matrix_parser, users=10, default_duration="8s")
    matrix_parser.set_defaults(handler=handle_matrix)


def _spec(args: argparse.Namespace, scenario: str) -> RunSpec:
    return RunSpec(
        scenario=scenario,
        users=args.users,
        duration=args.duration,
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


def handle_run(args: argparse.Namespace) -> int:
    outcome = run(_spec(args, args.scenario))
    print(outcome.summary)
    return outcome.exit_code


def handle_worker(args: argparse.Namespace) -> int:
    """Become `locust --worker` (exec: signals and the exit code are Locust's own)."""
    import os
    import sys

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
    return 2  # not reached


def handle_check(args: argparse.Namespace) -> int:
    if args.stack:
        return _check_stack(args)
    if args.run_dir is None:
        raise HarnessError("check: give a run directory, or --stack to judge a swarm on the running stack")
    if not Path(args.run_dir).is_dir():
        raise HarnessError(f"{args.run_dir} is not a run directory")
    outcome = check_saved_run(args.run_dir)
    print(outcome.summary)
    return outcome.exit_code


def _check_stack(args: argparse.Namespace) -> int:
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
    outcome = finish_swarm(stack, Path(run_dir), drain_timeout=args.drain_timeout)
    print(outcome.summary)
    return outcome.exit_code


def handle_swarm_begin(args: argparse.Namespace) -> int:
    from harness.stack.local import open_stack
    from harness.webui.session import begin_swarm

    if args.plan is not None and not args.plan.is_file():
        raise HarnessError(f"fault plan {args.plan} does not exist")
    stack = open_stack(args.root)
    if stack is None:
        raise HarnessError(f"no stack is running in {args.root}; start one with `harness up`")
    run_dir = begin_swarm(stack, args.runs_dir, args.scenario, plan=args.plan,
                          min_acknowledged=args.min_acknowledged)
    histories = (run_dir / "histories").resolve()
    print(f"swarm begun: {run_dir} (baseline saved)")
    print("run the load, recording into its histories/, e.g.:")
    root = "" if args.root == Path(".harness") else f" --harness-root {args.root}"
    print(f"  locust -f harness/locustfiles/{args.scenario}.py --harness-history-dir {histories}{root}")
    print("then judge it (heal, drain, export, check, report):")
    print(f"  harness check --stack{'' if args.root == Path('.harness') else f' --root {args.root}'}")
    return 0


def handle_smoke(args: argparse.Namespace) -> int:
    # Each smoke step starts a fresh stack so mutants never share state; a stack
    # left by `harness up` is not used.
    base = _spec(args, SCENARIOS[0])
    steps = smoke(_isolated(base), parallel=args.parallel)
    for step in steps:
        mark = "ok  " if step.passed else "FAIL"
        detail = step.error or (step.outcome.summary if step.outcome else "")
        print(f"{mark} {step.label}: {detail}")
    code = smoke_exit_code(steps)
    print("smoke: PASS" if code == 0 else f"smoke: FAIL (exit {code})")
    return code


def handle_matrix(args: argparse.Namespace) -> int:
    mutants = [value.strip() for value in args.mutants.split(",") if value.strip()]
    scenarios = [value.strip() for value in args.scenarios.split(",") if value.strip()]
    cells = matrix(_isolated(_spec(args, SCENARIOS[0])), mutants=mutants, scenarios=scenarios)
    print(format_matrix_table(cells))
    path = write_matrix(cells, args.runs_dir)
    print(f"matrix report: {path}")
    return matrix_exit_code(cells)


def _isolated(spec: RunSpec) -> RunSpec:
    return replace(spec, attach=False)

