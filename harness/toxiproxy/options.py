"""The server's command-line flags, spelled as `toxiproxy-server` spells them.

Go's flag package takes `-host x`, `-host=x`, `--host x` and `--host=x` alike, and
a boolean flag as `-proxy-metrics` or `-proxy-metrics=true|false`; every flag here
accepts all of these. `add_server_arguments` fills any argparse parser (used by
`python -m harness.toxiproxy` and by `harness toxiproxy serve`), and
`serve_from_arguments` runs the server from what it parsed.

| flag | meaning |
|---|---|
| `-host` | API address (default 127.0.0.1; the real server's is localhost) |
| `-port` | API port, 0 for any free port (default 8474) |
| `-config FILE` | proxies to create at start, in `/populate`'s JSON format |
| `-proxy-metrics` | `/metrics` with byte counts per proxy and direction |
| `-runtime-metrics` | `/metrics` with process and interpreter metrics |
| `-seed N` | seed for toxicity and jitter draws |
| `-version` | print the version and exit |
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from typing import Any

_TRUE = {"1", "t", "true", "TRUE", "True"}  # what Go's strconv.ParseBool accepts
_FALSE = {"0", "f", "false", "FALSE", "False"}


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is out of range 0-65535")
    return value


class _GoBool(argparse.Action):
    """A Go boolean flag: bare means true, `-flag=false` (or any strconv.ParseBool
    spelling) sets it explicitly."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs="?", const="true", default=False, metavar="BOOL", **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if values in _TRUE:
            setattr(namespace, self.dest, True)
        elif values in _FALSE:
            setattr(namespace, self.dest, False)
        else:
            parser.error(f"invalid boolean value {values!r} for flag {option_string}")


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the server's flags; their values land in `toxiproxy_*` attributes so
    they cannot clash with a surrounding CLI's own options."""
    parser.add_argument("-host", "--host", dest="toxiproxy_host", default="127.0.0.1",
                        help="API address (default 127.0.0.1)")
    parser.add_argument("-port", "--port", dest="toxiproxy_port", type=_port, default=8474,
                        help="API port, 0 for any free port (default 8474)")
    parser.add_argument("-config", "--config", dest="toxiproxy_config", metavar="FILE",
                        help="JSON file of proxies to create on startup (the /populate format)")
    parser.add_argument("-proxy-metrics", "--proxy-metrics", dest="toxiproxy_proxy_metrics", action=_GoBool,
                        help="serve per-proxy byte counters on /metrics")
    parser.add_argument("-runtime-metrics", "--runtime-metrics", dest="toxiproxy_runtime_metrics", action=_GoBool,
                        help="serve process and runtime metrics on /metrics")
    parser.add_argument("-seed", "--seed", dest="toxiproxy_seed", type=int, default=None,
                        help="seed for randomising toxics (default: from the clock)")
    parser.add_argument("-version", "--version", dest="toxiproxy_version", action=_GoBool,
                        help="print the version and exit")


def serve_from_arguments(args: argparse.Namespace) -> None:
    from harness.toxiproxy.api import VERSION
    from harness.toxiproxy.server import ServerOptions, run_server

    if args.toxiproxy_version:
        print(f"toxiproxy-server version {VERSION}")
        return
    if args.toxiproxy_seed is not None:
        random.seed(args.toxiproxy_seed)
    options = ServerOptions(
        config=args.toxiproxy_config,
        proxy_metrics=args.toxiproxy_proxy_metrics,
        runtime_metrics=args.toxiproxy_runtime_metrics,
    )
    run_server(args.toxiproxy_host, args.toxiproxy_port, options)
