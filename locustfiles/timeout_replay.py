"""API clients that retry after timeouts, double-click, and reuse keys with another body.

Run by hand against a running stack (settings from `harness status --env`):
    locust -f locustfiles/timeout_replay.py --host http://127.0.0.1:PORT
Catches the `api` mutant without faults (double clicks and fingerprint mismatches
create second orders for one key); with plans/flaky-network.yaml it also replays
requests whose responses were lost after the server committed.
"""

from locust import events, task

from harness.loadgen import flows
from harness.loadgen.recording import install
from harness.loadgen.user import DuplicatingUser

install(events)


class TimeoutReplayUser(DuplicatingUser):
    @task
    def create_and_pay(self) -> None:
        flows.timeout_replay_round(self.actor)
