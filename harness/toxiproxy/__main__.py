"""`python -m harness.toxiproxy -host 127.0.0.1 -port 8474 [-config FILE]
[-proxy-metrics] [-runtime-metrics]`, with toxiproxy-server's flags (also spelled
with two dashes); see harness.toxiproxy.options."""

from __future__ import annotations

import argparse

from harness.toxiproxy.options import add_server_arguments, serve_from_arguments


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m harness.toxiproxy", description="Embedded Toxiproxy server", allow_abbrev=False
    )
    add_server_arguments(parser)
    args = parser.parse_args(argv)
    serve_from_arguments(args)


if __name__ == "__main__":
    main()
