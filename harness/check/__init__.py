"""The checker: a run's history and final state in, a verdict with evidence out."""
