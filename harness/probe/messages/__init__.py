"""The probe's messages: it plays the producer of a team's message consumer.

- `spec`: one `messages:` entry of the probe config (broker, queue, body template, fact);
- `producer`: publishes the duplicates real producers and brokers make, recorded in
  the probe's history (`op: publish`, with its `kind`);
- `play`: one run's producers, the broker's own counts while it runs, and the drain
  after it (effects counted by the entry's oracle, dead letters listed);
- `checks`: the invariants `fact_applied_once`, `published_fact_applied`,
  `no_valid_message_dead_lettered`, and when a run proved too little.

The brokers themselves are behind one interface in harness.probe.brokers.
"""
