"""`harness probe`: the subcommand's parser and handler.

    harness probe --config probe.yaml [--upstream host:port] [--plan flaky-network]
    harness probe --upstream 127.0.0.1:8000 --path /payments \\
        --body '{"amount_cents": "{int:1-999}", "currency": "EUR"}' --id-pointer /id
    harness probe init --openapi openapi.yaml [--config probe.yaml]   # a starter config

Exit code: 0 pass (the draft's SHOULDs a service misses are printed as advice), 1 an
invariant was violated (with --strict, a SHOULD row too), 2 the harness failed or
the input was bad, 3 inconclusive.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from harness.bundled import plan_path
from harness.cli.argtypes import Subparsers, non_negative_int, positive_duration, positive_int
from harness.documents import parse_json
from harness.errors import HarnessError
from harness.probe.checker import DEFAULT_MIN_ACKNOWLEDGED
from harness.probe.config import PROFILES, ProbeConfig, ProbeConfigError, load_config, parse_upstream, simple_config
from harness.probe.runner import ProbeSpec, run_probe
from harness.probe.starter import starter_config


def add_probe(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "probe", help="probe any HTTP API that takes an Idempotency-Key, under faults (black box)",
        description="Put a Toxiproxy in front of a service, swarm it with duplicating clients under a "
                    "fault plan, and judge from the answers alone. Docs: docs/probe.md")
    parser.add_argument("action", nargs="?", choices=("init",),
                        help="init: write a commented starter config (with --openapi) to --config FILE or stdout")
    parser.add_argument("--config", type=Path, metavar="FILE", help="probe config (YAML); see docs/probe.md")
    parser.add_argument("--openapi", type=Path, metavar="FILE",
                        help="with init: the service's OpenAPI 3 document; every POST/PUT/PATCH taking an "
                             "Idempotency-Key header becomes an endpoint")
    parser.add_argument("--upstream", metavar="HOST:PORT", help="the service, host:port (overrides the config's)")
    parser.add_argument("--toxiproxy-url", metavar="URL", help="a running Toxiproxy to use instead of the embedded one")
    parser.add_argument("--plan", type=probe_plan, metavar="NAME|FILE",
                        help="fault plan; its windows act on proxy `app` (the probe's), the dependencies by "
                             "name and the process `service` (default: no faults)")
    parser.add_argument("--out", type=Path, metavar="DIR", help="run directory (default runs/probe-<time>)")
    parser.add_argument("--users", type=positive_int, metavar="N", help="Locust users (overrides load.users)")
    parser.add_argument("--duration", type=positive_duration, help="load duration (overrides load.duration)")
    parser.add_argument("--seed", type=int, metavar="N", help="seed of the users' choices (overrides load.seed)")
    parser.add_argument("--min-acknowledged", type=non_negative_int, default=DEFAULT_MIN_ACKNOWLEDGED, metavar="N",
                        help="fewer 2xx answers make the run inconclusive")
    parser.add_argument("--strict", action="store_true",
                        help="the draft's SHOULD rows (e.g. 400 for a missing key) fail the run instead of being "
                             "advice (as `strict: true` in the config)")
    simple = parser.add_argument_group("one endpoint without a config file")
    simple.add_argument("--path", help="URL path of the endpoint, e.g. /payments")
    simple.add_argument("--method", default="POST", help="HTTP method")
    simple.add_argument("--body", help="JSON body template, with {uuid}, {int:A-B}, {choice:a|b}, {stripe_id:pi}, {key}")
    simple.add_argument("--id-pointer", default="/id", metavar="POINTER", help="JSON pointer of the created id")
    simple.add_argument("--id-header", metavar="HEADER", help="header naming the created resource instead, e.g. Location")
    simple.add_argument("--read-path", metavar="PATH", help="read-back path with {id}, e.g. /payments/{id}")
    simple.add_argument("--profile", choices=tuple(PROFILES), default="ietf",
                        help="expected codes: ietf (400/422/409) or conflict-409 (payload mismatch 409)")
    simple.add_argument("--header", action="append", default=[], metavar="NAME:VALUE",
                        help="extra header for every request (repeatable), e.g. 'Authorization: Bearer x'")
    parser.set_defaults(handler=handle_probe)


def probe_plan(text: str) -> Path:
    """A bundled plan's name or a plan file. Its targets depend on the config (its
    dependencies, its service), so the probe checks the plan itself, before any run
    directory exists (harness.probe.plan_targets)."""
    try:
        return plan_path(text)
    except HarnessError as error:
        raise argparse.ArgumentTypeError(str(error).splitlines()[0]) from None


def handle_probe(args: argparse.Namespace) -> int:
    if args.action == "init":
        return _init(args)
    if args.openapi is not None:
        raise ProbeConfigError("--openapi: only with `harness probe init`")
    config = _config(args)
    load = config.load
    load = replace(load, users=args.users or load.users, duration=args.duration or load.duration,
                   seed=load.seed if args.seed is None else args.seed)
    config = replace(config, load=load, strict=config.strict or args.strict)
    out = args.out or Path("runs") / f"probe-{time.strftime('%Y%m%d-%H%M%S')}"
    result = run_probe(ProbeSpec(config=config, out_dir=out, upstream=args.upstream,
                                 toxiproxy_url=args.toxiproxy_url, plan=args.plan,
                                 min_acknowledged=args.min_acknowledged))
    print(result.summary())
    return result.exit_code


def _init(args: argparse.Namespace) -> int:
    if args.openapi is None:
        raise ProbeConfigError("harness probe init: --openapi FILE is required (the service's OpenAPI document)")
    text = starter_config(args.openapi)
    if args.config is None:
        print(text, end="")
        return 0
    if args.config.exists():
        raise ProbeConfigError(f"--config: {args.config} exists; init writes a new file only")
    args.config.write_text(text, encoding="utf-8")
    print(f"wrote {args.config}: check the lines marked CONFIRM, then "
          f"`harness probe --config {args.config} --upstream HOST:PORT`")
    return 0


def _config(args: argparse.Namespace) -> ProbeConfig:
    if args.upstream is not None:
        args.upstream = parse_upstream(args.upstream)
    if args.config is not None:
        if args.path or args.body:
            raise ProbeConfigError("give either --config or --path/--body, not both")
        return load_config(args.config)
    if not (args.path and args.body and args.upstream):
        raise ProbeConfigError("without --config, --upstream, --path and --body are required")
    body = parse_json(args.body, source="--body", error=ProbeConfigError)  # deep or huge: one line too
    headers = {}
    for item in args.header:
        name, sep, value = item.partition(":")
        if not sep:
            raise ProbeConfigError(f"--header: expected NAME:VALUE, not {item!r}")
        headers[name.strip()] = value.strip()
    return simple_config(upstream=args.upstream, path=args.path, body=body, method=args.method,
                         id_pointer=args.id_pointer, id_header=args.id_header, read_path=args.read_path,
                         profile=args.profile, headers=headers)
