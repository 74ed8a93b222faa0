"""The probe's payment provider: the config's `provider:` section (spec), the provider the
probe starts behind its Toxiproxy as the dependency `provider` (play), and its ledger read
after the load. The invariants judged on that ledger live in harness.probe.ledger_checks."""
