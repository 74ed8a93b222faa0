"""One run from start to verdict (Jepsen's run!): the runner, the smoke job, the matrix."""
