"""API clients that retry after timeouts, double-click, reuse keys with another body,
and share key spaces across tenants on purpose: every tenant creating with one
Idempotency-Key at once (`shared_key`), another tenant reading or paying a user's
order (`cross_tenant_read`, `cross_tenant_pay`: 404).

Run by hand against a running stack (settings from `harness status --env`):
    locust -f harness/locustfiles/timeout_replay.py --host http://127.0.0.1:PORT
Catches the `api`, `api-fingerprint`, `api-tenant` and `order-tenant` controls
without faults; with harness/plans/flaky-network.yaml it also replays requests whose
responses were lost after the server committed, reaches the API layer's recovery
point (Redis replies lost after the create script ran) and retries bodies cut in
transit (the `incomplete-body` control; harness/plans/cut-bodies.yaml too).
"""

from locust import events, task

from harness.load import flows
from harness.load.recording import install
from harness.load.user import DuplicatingUser
from harness.webui import install as install_chaos_tab

install_chaos_tab(events)  # first: it names each test's run directory (docs/webui.md)
install(events)


class TimeoutReplayUser(DuplicatingUser):
    @task
    def create_and_pay(self) -> None:
        flows.timeout_replay_round(self.actor)
