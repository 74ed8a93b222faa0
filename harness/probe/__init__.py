"""`harness probe`: judge any HTTP API that takes an Idempotency-Key, from the outside.

The probe puts a Toxiproxy in front of a service it does not control, swarms it with
Locust users that make the duplicates real clients make, injects network faults
under a fault plan, and judges from what the clients saw (plus optional read-backs)
whether every key named one resource, replays were faithful and misuses were
refused. Modules: `config` (the YAML), `users` (the Locust users), `checker` (the
invariants), `conformance` (the IETF draft's requirements), `runner` (the run),
`report` (the HTML page), `cli` (the subcommand), `pytest_plugin` (the fixtures).
"""
