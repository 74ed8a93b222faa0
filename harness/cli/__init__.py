"""`harness`: the command line (one module per group of subcommands).

`harness.cli.main.main(argv)` runs a command line; the console script starts at
`harness.cli.entry.run`. This package imports nothing itself, so the entry point can
install its signal handlers before the subcommands' imports (harness.cli.entry).
"""
