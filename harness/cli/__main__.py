"""`python -m harness.cli`: the same as the `harness` script."""

import sys

from harness.cli.entry import run

if __name__ == "__main__":
    sys.exit(run())
