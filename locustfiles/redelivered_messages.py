"""A producer that publishes payment messages with duplicates: the same message_id as
a new stream entry, and the same fact under a new message_id.

Run by hand: locust -f locustfiles/redelivered_messages.py --host http://127.0.0.1:PORT
(HARNESS_REDIS_URL and HARNESS_STREAM point at the app's Redis). Catches the `inbox`
mutant without faults; with TARGET_APP_HANDLER_DELAY_MS and plans/consumer-crashes.yaml
(a pause longer than the reclaim time) also the `inbox-nonatomic` mutant.
"""

from locust import User, between, events, task

from harness.loadgen import flows
from harness.loadgen.actor import Actor
from harness.loadgen.recording import install, load_process

install(events)


class RedeliveredMessagesUser(User):
    wait_time = between(0.0, 0.05)

    def on_start(self) -> None:
        self.actor = Actor(load_process(self.environment), self.host)

    def on_stop(self) -> None:
        self.actor.close()

    @task
    def publish_with_duplicates(self) -> None:
        flows.message_round(self.actor)
