"""API clients that retry after timeouts, double-click, and reuse keys with another body.

Run by hand against a running stack (settings from `harness status --env`):
    locust -f locustfiles/timeout_replay.py --host http://127.0.0.1:PORT
Catches the `api` mutant without faults (double clicks and fingerprint mismatches
create second orders for one key); with plans/flaky-network.yaml it also replays
requests whose responses were lost after the server committed.
"""

from locust import User, between, events, task

from harness.loadgen import flows
from harness.loadgen.actor import Actor
from harness.loadgen.recording import install, load_process

install(events)


class TimeoutReplayUser(User):
    wait_time = between(0.0, 0.05)

    def on_start(self) -> None:
        self.actor = Actor(load_process(self.environment), self.host)

    def on_stop(self) -> None:
        self.actor.close()

    @task
    def create_and_pay(self) -> None:
        flows.timeout_replay_round(self.actor)
