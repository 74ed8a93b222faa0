"""`harness`: the command line (one module per group of subcommands)."""

from harness.cli.main import main

__all__ = ["main"]
