"""`harness provider serve`: the Stripe-compatible payment provider in the foreground
(harness.provider; options in harness.provider.options, docs/provider.md). Bad input is
one line and exit 2 (through `harness.cli.main`); Ctrl-C, SIGTERM and SIGHUP stop it,
export the ledger when `--ledger` was given, and exit 0."""

from __future__ import annotations

import argparse

from harness.cli.argtypes import Subparsers


def add_provider(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("provider", help="the Stripe-compatible payment provider (with a ledger)")
    commands = parser.add_subparsers(dest="provider_command", required=True)
    serve = commands.add_parser("serve", help="serve a Stripe-compatible API until Ctrl-C; the ledger is "
                                "written to --ledger on exit", allow_abbrev=False)
    from harness.provider.options import add_server_arguments

    add_server_arguments(serve)
    serve.set_defaults(handler=handle_provider_serve)


def handle_provider_serve(args: argparse.Namespace) -> int:
    from harness.provider.options import config_from_arguments
    from harness.provider.server import serve_forever

    return serve_forever(config_from_arguments(args))
