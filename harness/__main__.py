"""`python -m harness`: the same command line as the `harness` script."""

import sys

from harness.cli.entry import run

if __name__ == "__main__":
    sys.exit(run())
