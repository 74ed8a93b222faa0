"""Every duplicate source at once, plus one payment sent through the API, the webhook
and the stream at the same time (`cross_channel`). The tenant attempts (`shared_key`,
`cross_tenant_read`, `cross_tenant_pay`) come with its timeout_replay rounds.

Run by hand: locust -f harness/locustfiles/mixed.py --host http://127.0.0.1:PORT
"""

from locust import events, task

from harness.load import flows
from harness.load.recording import install
from harness.load.user import DuplicatingUser
from harness.webui import install as install_chaos_tab

install_chaos_tab(events)  # first: it names each test's run directory (docs/webui.md)
install(events)


class MixedUser(DuplicatingUser):
    @task(3)
    def timeout_replay(self) -> None:
        flows.timeout_replay_round(self.actor)

    @task(2)
    def duplicate_webhooks(self) -> None:
        flows.webhook_round(self.actor)

    @task(2)
    def redelivered_messages(self) -> None:
        flows.message_round(self.actor)

    @task(3)
    def cross_channel(self) -> None:
        flows.cross_channel_round(self.actor)
