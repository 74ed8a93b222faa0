"""The idempotency chaos harness: stack, nemesis, load, history, checker, report."""
