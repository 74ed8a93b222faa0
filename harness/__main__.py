"""`python -m harness`: the same command line as the `harness` script."""

import sys

from harness.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
