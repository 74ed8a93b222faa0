"""A stateful, Stripe-compatible payment provider: a server of its own (docs/provider.md).

The official `stripe` SDK talks to it unchanged when its API base points at it. It keeps
a ledger of every charge (the ground truth of "did money move twice"), enforces Stripe's
idempotency rules, signs and sends webhooks from the ledger through harness.webhooks,
and can answer 500 or 429 after it charged. `server.EmbeddedProvider` runs it in a
thread; `python -m harness.provider` and `harness provider serve` run it in the
foreground. It imports harness.webhooks and the leaves, never the probe or the app.
"""
