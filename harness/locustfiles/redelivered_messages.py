"""A producer that publishes payment messages with duplicates: the same message_id as
a new stream entry, and the same fact under a new message_id.

Run by hand: locust -f harness/locustfiles/redelivered_messages.py --host http://127.0.0.1:PORT
(HARNESS_REDIS_URL and HARNESS_STREAM point at the app's Redis). Catches the `inbox`
mutant without faults; with TARGET_APP_HANDLER_DELAY_MS and harness/plans/consumer-crashes.yaml
(a pause longer than the reclaim time) also the `inbox-nonatomic` mutant.
"""

from locust import events, task

from harness.load import flows
from harness.load.recording import install
from harness.load.user import DuplicatingUser
from harness.webui import install as install_chaos_tab

install_chaos_tab(events)  # first: it names each test's run directory (docs/webui.md)
install(events)


class RedeliveredMessagesUser(DuplicatingUser):
    @task
    def publish_with_duplicates(self) -> None:
        flows.message_round(self.actor)
