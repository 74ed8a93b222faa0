"""The checker: a run's history and final state in, a verdict with evidence out.

It never imports `harness.run`: what it reads of a run directory is declared in
`run_files` (`RunFiles`, `RunSettings`), and `harness.run.rundir.RunDir` is one.
"""
