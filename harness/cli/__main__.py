"""`python -m harness.cli`: the same as the `harness` script."""

import sys

from harness.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
