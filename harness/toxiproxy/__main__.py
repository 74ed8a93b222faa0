"""`python -m harness.toxiproxy --host 127.0.0.1 --port 8474`"""

from __future__ import annotations

import argparse

from harness.toxiproxy.server import run_server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.toxiproxy", description="Embedded Toxiproxy server")
    parser.add_argument("--host", default="127.0.0.1", help="API address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8474, help="API port, 0 for any free port (default 8474)")
    args = parser.parse_args(argv)
    run_server(args.host, args.port)


if __name__ == "__main__":
    main()
