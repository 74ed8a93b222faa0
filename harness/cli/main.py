"""`harness`: the command line.

Each subcommand is one `add_*` function that registers its parser (with
`set_defaults(handler=...)`) and one handler `(args) -> int`. Errors are translated
in one place, `main`: bad input and harness failures print `harness: <message>` on
stderr and exit 2 (the exit codes are `harness.exit_codes`').

Every parser, the subcommands' included (whichever module adds them), is a `Parser`
with `HelpFormatter`: each option's help ends with its default, a duration's default
is shown as a duration (`30s`, `2m`) and its metavar is DURATION, explained at the
end of the help. Every command is listed in docs/cli.md.

`main` builds only the parser of the command its arguments name (COMMAND_ADDERS):
a `harness down` imports neither the probe nor the run. With no command, an option
first (`--help`, `--version`) or an unknown word, it builds the whole parser, so the
help and the error list every command; `build_parser()` is always the whole one.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import os
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NoReturn

from harness.cli.argtypes import (
    Subparsers,
    add_root_option,
    duration,
    format_duration,
    non_negative_int,
    positive_duration,
    positive_int,
)
from harness.errors import HarnessError
from harness.exit_codes import EXIT_HARNESS, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_VIOLATION
from harness.load.settings import load_environment
from harness.nemesis.toxiproxy_client import Nemesis, NemesisError
from harness.stack.info import StackInfo
from harness.stack.lifeline import Lifeline, exit_code_for, interrupt_signals
from harness.stack.local import (
    StackAlreadyRunning,
    StackSettings,
    open_stack,
    start_stack,
    target_app_env,
)

if TYPE_CHECKING:
    from harness.stack.protocol import ServiceStatus, Stack

DURATION_TYPES = (duration, positive_duration)
DURATION_NOTE = "DURATION: 30s, 2m, 1m30s, 500ms or plain seconds"
EXIT_CODES_HELP = (
    f"exit codes: {EXIT_OK} pass, {EXIT_VIOLATION} an invariant was violated, {EXIT_HARNESS} the harness "
    f"failed or the input was bad, {EXIT_INCONCLUSIVE} inconclusive (nothing violated, but a promised path "
    "was never exercised or too little was acknowledged), 128+N when stopped by signal N (130 Ctrl-C, "
    "129 SIGHUP, 143 SIGTERM)")


class UsageError(HarnessError):
    """The command line itself is wrong."""


def _default_text(action: argparse.Action) -> str | None:
    """How the help shows an option's default; None when there is nothing to show
    (a flag, no default, or the help already says it)."""
    default = action.default
    if (not action.option_strings or action.nargs == 0 or default is None or default is argparse.SUPPRESS
            or isinstance(default, bool) or "default" in (action.help or "").lower()):
        return None
    if action.type in DURATION_TYPES and isinstance(default, (int, float)):
        return format_duration(float(default))
    if isinstance(default, (list, tuple)):
        return ",".join(map(str, default)) or "none"
    return str(default) if str(default) else "none"


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, with every option's default and DURATION for durations."""

    def _format_action(self, action: argparse.Action) -> str:
        shown = _default_text(action)
        if shown is not None and action.help is not argparse.SUPPRESS:
            action = copy.copy(action)  # the parser's own action keeps its help
            suffix = f"(default {shown})".replace("%", "%%")  # the help is a %-format
            action.help = f"{action.help} {suffix}" if action.help else suffix
        return super()._format_action(action)

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        if action.type in DURATION_TYPES:
            return "DURATION"
        return super()._get_default_metavar_for_optional(action)


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage, so every error is one line.

    Subparsers are made with the class of their parent, so every subcommand,
    whichever module adds it, gets this error handling and `HelpFormatter`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        command = self.prog.partition(" ")[2]  # "harness fault add" -> "fault add"
        raise UsageError(f"{command}: {message}" if command else message)

    def format_help(self) -> str:
        text = super().format_help()
        if any(action.type in DURATION_TYPES for action in self._actions):
            text += f"\n{DURATION_NOTE}\n"
        return text


# --- up ------------------------------------------------------------------------------

def add_up(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("up", help="start the stack in the background")
    add_root_option(parser)
    parser.add_argument("--app-workers", type=positive_int, default=4, metavar="N", help="gunicorn workers")
    parser.add_argument("--consumers", type=non_negative_int, default=2, metavar="N", help="stream consumers")
    parser.add_argument("--toxiproxy-url", metavar="URL", help="use this Toxiproxy instead of starting one "
                        "(default: $TOXIPROXY_URL, else toxiproxy-server on PATH, else the embedded one)")
    parser.add_argument("--health-timeout", type=positive_duration, default=30.0,
                        help="how long each service may take to become healthy")
    parser.add_argument("--compose", action="store_true", help="attach to the docker compose services")
    parser.add_argument("--compose-file", type=Path, metavar="FILE",
                        help="compose file (default ./docker-compose.yml)")
    parser.add_argument("--proxy-prefix", default="", metavar="PREFIX", help="prefix of this stack's proxy names, for a "
                        "Toxiproxy shared with others (e.g. ci-42- gives ci-42-app, ci-42-redis)")
    parser.add_argument("--foreground", action="store_true", help="keep the stack only while this "
                        "command runs: Ctrl-C, SIGTERM or SIGHUP stop it, and so does this process dying")
    parser.set_defaults(handler=handle_up)


def handle_up(args: argparse.Namespace) -> int:
    from harness.cli.run_commands import check_app_environment

    check_app_environment(os.environ)
    settings = StackSettings(
        root=args.root, app_workers=args.app_workers, consumers=args.consumers,
        env=target_app_env(os.environ),
        toxiproxy_url=args.toxiproxy_url or os.environ.get("TOXIPROXY_URL") or None,
        health_timeout=args.health_timeout, compose=args.compose, compose_file=args.compose_file,
        proxy_prefix=args.proxy_prefix, owner="foreground" if args.foreground else "up",
    )
    lifeline = Lifeline() if args.foreground else None  # held open until this process ends
    try:
        stack = start_stack(settings, lifeline=lifeline)
    except StackAlreadyRunning as error:
        print(f"harness: {error}")
        return EXIT_OK
    info = stack.info
    print(f"stack up in {info.root} ({info.mode})")
    print(f"  app (through toxiproxy)  {info.app_url}")
    print(f"  app (direct)             {info.app_direct_url}")
    print(f"  toxiproxy API            {info.toxiproxy_url} ({info.toxiproxy_kind})")
    print(f"  redis (direct)           {info.redis_url}")
    if info.unsafe_disable:
        print(f"  UNSAFE: layers disabled  {', '.join(info.unsafe_disable)}")
    print("try:")
    print(f"  curl -i -X POST {info.app_url}/api/v1/orders -H 'Content-Type: application/json' "
          "-H 'Idempotency-Key: demo-1' "
          "-d '{\"sku\": \"sku-1\", \"quantity\": 1, \"amount_cents\": 1000, \"currency\": \"EUR\"}'")
    print("  harness fault add latency --proxy app --latency 800   # then the same curl again")
    print("  harness status; harness fault clear; harness down")
    if args.foreground:
        from harness.cli.stack_commands import hold_in_foreground

        sys.stdout.flush()
        return hold_in_foreground(stack)
    return EXIT_OK


# --- down ----------------------------------------------------------------------------

def add_down(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("down", help="stop the stack (a no-op when none is running)")
    add_root_option(parser)
    parser.add_argument("--all", action="store_true",
                        help="every stack this checkout started (from its registry), run-owned ones too")
    parser.set_defaults(handler=handle_down)


def handle_down(args: argparse.Namespace) -> int:
    if args.all:
        from harness.cli.stack_commands import down_all

        return down_all()
    stack = open_stack(args.root)
    if stack is None:
        print(f"no stack is running in {args.root}")
        return EXIT_OK
    stack.down()
    print(f"stack in {args.root} stopped")
    return EXIT_OK


# --- status --------------------------------------------------------------------------

def add_status(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("status", help="services, ports, health and active faults")
    add_root_option(parser)
    parser.add_argument("--all", action="store_true",
                        help="one line per stack this checkout started (from its registry)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="machine-readable")
    output.add_argument("--env", action="store_true",
                        help="`export` lines for running a locustfile by hand")
    parser.set_defaults(handler=handle_status)


def active_faults(toxiproxy_url: str) -> list[dict[str, Any]]:
    """Toxics and disabled proxies, as status and `fault list` show them."""
    nemesis = Nemesis(toxiproxy_url)
    faults: list[dict[str, Any]] = []
    for name, proxy in sorted(nemesis.proxies().items()):
        if not proxy.enabled:
            faults.append({"kind": "proxy_down", "proxy": name})
    for toxic in nemesis.list_toxics():
        faults.append({"kind": "toxic", "proxy": toxic.proxy, "name": toxic.name, "type": toxic.type,
                       "stream": toxic.stream, "toxicity": toxic.toxicity,
                       "attributes": dict(toxic.attributes)})
    return faults


def process_faults(services: Sequence[ServiceStatus]) -> list[dict[str, Any]]:
    return [{"kind": "process", "service": row["name"], "status": row["status"]}
            for row in services if row.get("status") not in ("running", "external")]


def status_document(stack: Stack) -> dict[str, Any]:
    info = stack.info
    services = stack.services()
    try:
        faults = active_faults(info.toxiproxy_url)
    except NemesisError as error:
        faults = [{"kind": "unknown", "error": str(error)}]
    document: dict[str, Any] = {
        "running": True, "mode": info.mode, "root": info.root, "started_at": info.started_at,
        "app_url": info.app_url, "app_direct_url": info.app_direct_url, "toxiproxy_url": info.toxiproxy_url,
        "toxiproxy_kind": info.toxiproxy_kind, "redis_url": info.redis_url, "redis_proxy_url": info.redis_proxy_url,
        "stream": info.stream, "group": info.group, "unsafe_disable": list(info.unsafe_disable)}
    document["services"] = [
        {"name": row["name"], "pid": row["pid"], "port": row["port"], "healthy": row["healthy"],
         "status": row["status"], "log": row.get("log")} for row in services]
    document["faults"] = faults + process_faults(services)
    return document


def env_lines(info: StackInfo) -> list[str]:
    values = {"LOCUST_HOST": info.app_url, **load_environment(info, seed=7)}
    return [f"export {name}={shlex.quote(str(value))}" for name, value in values.items()]


def handle_status(args: argparse.Namespace) -> int:
    if args.all:
        if args.env:
            raise UsageError("status: --all and --env do not go together")
        from harness.cli.stack_commands import status_all

        return status_all(as_json=args.json)
    stack = open_stack(args.root)
    if stack is None:
        if args.json:
            print(json.dumps({"running": False, "root": str(args.root)}))
        elif args.env:
            raise HarnessError(f"no stack is running in {args.root}; start one with `harness up`")
        else:
            print(f"no stack is running in {args.root}")
        return EXIT_OK
    if args.env:
        print("\n".join(env_lines(stack.info)))
        return EXIT_OK
    document = status_document(stack)
    if args.json:
        print(json.dumps(document, indent=2))
        return EXIT_OK
    print(f"stack in {document['root']} ({document['mode']}), app {document['app_url']} "
          f"(direct {document['app_direct_url']}), toxiproxy {document['toxiproxy_url']}")
    if document.get("unsafe_disable"):
        print(f"UNSAFE: layers disabled: {', '.join(document['unsafe_disable'])}")
    print(f"{'SERVICE':<12} {'PID':>7} {'PORT':>6} {'STATUS':<9} HEALTHY")
    for row in document["services"]:
        print(f"{row['name']:<12} {row['pid'] or '-':>7} {row['port'] or '-':>6} "
              f"{row['status']:<9} {'yes' if row['healthy'] else 'NO'}")
    print(f"faults: {describe_faults(document['faults']) or 'none'}")
    return EXIT_OK


def describe_faults(faults: Sequence[dict[str, Any]]) -> str:
    parts = []
    for fault in faults:
        if fault["kind"] == "toxic":
            attributes = " ".join(f"{k}={v}" for k, v in fault["attributes"].items())
            parts.append(f"{fault['name']} on {fault['proxy']} ({fault['type']} {fault['stream']} "
                         f"{attributes} toxicity={fault['toxicity']:g})")
        elif fault["kind"] == "proxy_down":
            parts.append(f"proxy {fault['proxy']} down")
        elif fault["kind"] == "process":
            parts.append(f"{fault['service']} {fault['status']}")
        else:
            parts.append(str(fault.get("error")))
    return "; ".join(parts)


# --- toxiproxy serve -------------------------------------------------------------------

def add_toxiproxy(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("toxiproxy", help="the embedded Toxiproxy server")
    commands = parser.add_subparsers(dest="toxiproxy_command", required=True)
    serve = commands.add_parser("serve", help="serve the Toxiproxy HTTP API until Ctrl-C "
                                "(toxiproxy-server's flags: -host, -port, -config, -proxy-metrics, ...)",
                                allow_abbrev=False)
    from harness.toxiproxy.options import add_server_arguments

    add_server_arguments(serve)
    serve.set_defaults(handler=handle_toxiproxy_serve)


def handle_toxiproxy_serve(args: argparse.Namespace) -> int:
    from harness.toxiproxy.options import serve_from_arguments

    serve_from_arguments(args)
    return EXIT_OK


# --- completion ----------------------------------------------------------------------

def add_completion(subparsers: Subparsers) -> None:
    from harness.cli.completion import SHELLS

    parser = subparsers.add_parser(
        "completion", help="print a shell completion script (source <(harness completion bash))",
        description="Print a completion script generated from this command line: subcommands, options, "
                    "scenario and plan names, and the other choices. Install it with "
                    "`source <(harness completion bash)` in ~/.bashrc.")
    parser.add_argument("shell", choices=SHELLS)
    parser.set_defaults(handler=handle_completion)


def handle_completion(args: argparse.Namespace) -> int:
    from harness.cli.completion import completion_script

    sys.stdout.write(completion_script(args.shell, build_parser()))
    return EXIT_OK


# --- the boundary ----------------------------------------------------------------------

# Each command word, by the (module, function) of the `add_*` function that registers
# it, in the order the help lists them; a new subcommand is one more row. `main` builds
# only the one a command line names, so `harness down` does not import the probe, the
# run and the checker (about 0.2 s of CPU in every such process).
COMMAND_ADDERS: Mapping[str, tuple[str, str]] = MappingProxyType({
    "up": (__name__, "add_up"), "down": (__name__, "add_down"), "status": (__name__, "add_status"),
    "fault": ("harness.cli.fault_commands", "add_fault"),
    **{command: ("harness.cli.run_commands", "add_parsers")
       for command in ("run", "worker", "check", "swarm", "smoke", "matrix")},
    "toxiproxy": (__name__, "add_toxiproxy"),
    "probe": ("harness.cli.probe_commands", "add_probe"),
    "provider": ("harness.cli.provider_commands", "add_provider"),
    "completion": (__name__, "add_completion"),
})


def _adder(module: str, function: str) -> Callable[[Subparsers], None]:
    adder: Callable[[Subparsers], None] = getattr(importlib.import_module(module), function)
    return adder


def parser_adders() -> list[Callable[[Subparsers], None]]:
    """Every subcommand's `add_*` function (COMMAND_ADDERS), each once, in its order."""
    return list(dict.fromkeys(_adder(*place) for place in COMMAND_ADDERS.values()))


def command_adder(argv: Sequence[str]) -> Callable[[Subparsers], None] | None:
    """The `add_*` function of the command `argv` starts with, its module imported; None
    when argv does not start with a known command (no arguments, an option such as
    --help or --version, a typo): then the whole parser is built, and its help or its
    error lists every command as before."""
    if not argv or argv[0] not in COMMAND_ADDERS:
        return None
    return _adder(*COMMAND_ADDERS[argv[0]])


def package_version() -> str:
    """The installed distribution's version (the source tree's, for an editable install)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("idempotency-chaos-harness")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser(adders: Sequence[Callable[[Subparsers], None]] | None = None) -> Parser:
    """The command line's parser: every subcommand, or only those `adders` register."""
    parser = Parser(prog="harness", description="Idempotency chaos harness: prove that a "
                    "duplicated request never becomes a duplicated payment.",
                    epilog=f"{EXIT_CODES_HELP}. Every command: docs/cli.md.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    # Typed as a plain ArgumentParser so the subcommands' `add_*` functions take the one
    # `Subparsers` type; at run time the subparsers are still `Parser`s (argparse makes
    # them of the parent's class).
    root: argparse.ArgumentParser = parser
    subparsers = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in parser_adders() if adders is None else adders:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        # SIGTERM and SIGHUP stop a command as Ctrl-C does: every `finally` heals and stops.
        with interrupt_signals():
            words = sys.argv[1:] if argv is None else list(argv)
            adder = command_adder(words)
            args = build_parser(None if adder is None else [adder]).parse_args(words)
            return int(args.handler(args))
    except (HarnessError, OSError) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        print(f"harness: {lines[0]}", file=sys.stderr)
        # A service that would not start shows the end of its log below the message.
        for line in lines[1:]:
            print(f"  {line}", file=sys.stderr)
        return EXIT_HARNESS
    except KeyboardInterrupt as interrupt:
        print(f"harness: interrupted ({interrupt or 'SIGINT'})", file=sys.stderr)
        return exit_code_for(interrupt)


if __name__ == "__main__":
    sys.exit(main())
