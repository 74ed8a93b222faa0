"""A payment provider that re-sends webhooks: bursts, delayed and out-of-order copies,
a conflicting provider_ref, a wrong amount, and stale/future/tampered/missing signatures.

Run by hand: locust -f harness/locustfiles/duplicate_webhooks.py --host http://127.0.0.1:PORT
(TARGET_APP_WEBHOOK_SECRET must match the app's; the load signs with its own code,
harness/load/signing.py). Catches the `domain` mutant without faults (concurrent
copies and the conflicting ref become second payments), and the `domain-amount` and
`webhook-signature` controls (a wrong amount or a bad signature answered ok).
"""

from locust import events, task

from harness.load import flows
from harness.load.recording import install
from harness.load.user import DuplicatingUser
from harness.webui import install as install_chaos_tab

install_chaos_tab(events)  # first: it names each test's run directory (docs/webui.md)
install(events)


class DuplicateWebhooksUser(DuplicatingUser):
    @task
    def deliver_webhooks(self) -> None:
        flows.webhook_round(self.actor)
