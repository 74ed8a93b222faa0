"""`python -m harness.provider [--host H] [--port P] [--seed N] [--ledger PATH] [--webhook URL
--webhook-secret S]...`: the payment provider in the foreground (options: harness.provider.options).
Bad input is one line on stderr and exit 2, as `harness provider serve` does."""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

from harness.errors import HarnessError
from harness.provider.options import add_server_arguments, config_from_arguments
from harness.provider.server import serve_forever


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.provider",
                                     description="A Stripe-compatible payment provider with a ledger",
                                     allow_abbrev=False)
    add_server_arguments(parser)
    args = parser.parse_args(argv)
    try:
        config = config_from_arguments(args)
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _stop)
        return serve_forever(config)
    except HarnessError as error:
        print(f"provider: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
