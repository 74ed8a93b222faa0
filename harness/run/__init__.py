"""One run from start to verdict (Jepsen's run!): the runner, its cleanup, the run
directory (`rundir.RunDir`, Jepsen's store), the smoke job, the matrix."""
