"""The probe's webhooks: it plays the provider of a team's webhook receiver.

- `play`: one run's deliveries for the config's `webhooks:` entries (harness.webhooks
  signs and sends them through the probe's proxy), each recorded in the probe's
  history (`op: webhook`, with its `kind`), the provider's late retry after the load,
  and the effects of every fact counted by the entry's oracle;
- `checks`: the receiver invariants `fact_applied_once`, `acknowledged_fact_applied`,
  `refused_not_applied`, `delivery_acknowledged` and the reported `answered_in_time`,
  and when a run proved too little;
- `conformance`: the receiver's rows of the conformance table.

The schemes, events and deliveries themselves are harness.webhooks (docs/webhooks.md).
"""
