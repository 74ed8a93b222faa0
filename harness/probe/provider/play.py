"""The payment provider of one probe run: started before the service, read after the load.

`ProbeProvider(spec, seed=..., run_dir=...)` runs a `harness.provider.server.EmbeddedProvider`
on a free loopback port with the spec's secret key, the config's seed (ids and fault draws
repeat per seed) and the spec's provider-side faults (`provider.faults`: 500/429 after the
charge, slow answers: what a proxy cannot do). The rig (harness.probe.rig) puts the
probe's Toxiproxy proxy `provider` in front of it, like any dependency, and hands the
service that proxy's URL as `{provider.url}`; the plan's toxics on `provider` then delay,
cut or reset the provider's answers after it charged.

`webhook_base` is where the spec's `webhooks` paths live (the service's own address):
every event of the ledger is delivered there, signed with the path's secret, as the
entry's delivery kinds say (retries, concurrent copies, late duplicates, disorder).

`export()` reads the ledger (typed records) and writes it to `ledger.ndjson` in the run
directory, the ground truth the ledger invariants judge (harness.probe.ledger_checks).
`adopt_event(event)` keeps the objects a webhook event the probe made names (the probe's
`webhooks:` rounds, harness.probe.webhooks.play), so a receiver that fetches the object
it was told about from `{provider.url}` gets it, not a 404.
`stop()` stops the provider; safe twice.
"""

from __future__ import annotations

from pathlib import Path

from harness.probe.provider.spec import ProviderSpec
from harness.provider.control import ProviderControl
from harness.provider.outbox import Endpoint
from harness.provider.records import LedgerRecord, write_ledger
from harness.provider.server import EmbeddedProvider, ProviderConfig
from harness.webhooks.events import Event

LEDGER_FILE = "ledger.ndjson"
HOST = "127.0.0.1"


class ProbeProvider:
    """The run's EmbeddedProvider with the spec's key, webhooks and faults."""

    def __init__(self, spec: ProviderSpec, *, seed: int, run_dir: Path) -> None:
        self.spec = spec
        self.seed = seed
        self.run_dir = Path(run_dir)
        self.server: EmbeddedProvider | None = None

    @property
    def address(self) -> str:
        """host:port of the provider itself (the proxy's upstream)."""
        if self.server is None:
            raise RuntimeError("the provider is not started")
        return f"{HOST}:{self.server.port}"

    def start(self, webhook_base: str | None = None) -> ProbeProvider:
        hooks = tuple(Endpoint(url=f"{webhook_base.rstrip('/')}{hook.path}", secret=hook.secret, kinds=hook.kinds,
                               late_after=hook.late_after, timeout=hook.timeout, tolerance=hook.tolerance)
                      for hook in self.spec.webhooks) if webhook_base else ()
        server = EmbeddedProvider(ProviderConfig(host=HOST, port=0, seed=self.seed,
                                                 api_keys=frozenset({self.spec.api_key}), webhooks=hooks))
        for rule in self.spec.faults:
            server.add_fault(rule)
        self.server = server.start()
        return self

    def control(self) -> ProviderControl:
        """The provider's control surface, straight to it (not through the proxy's toxics):
        what a plan's provider_fault windows arm and read back."""
        if self.server is None:
            raise RuntimeError("the provider is not started")
        return ProviderControl(self.server.url, self.spec.api_key)

    def adopt_event(self, event: Event) -> None:
        """The event's objects served by the provider (harness.provider's `Ledger.adopt_event_objects`)."""
        if self.server is not None:
            self.server.ledger.adopt_event_objects(event.data())

    def export(self) -> list[LedgerRecord]:
        """The ledger now, also written to the run directory's ledger.ndjson."""
        if self.server is None:
            return []
        records = self.server.ledger.records()
        write_ledger(self.run_dir / LEDGER_FILE, records)
        return records

    def stop(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.stop(drain_timeout=2.0)
