"""The Locust user every scenario builds on: one Actor (a recorded client) per user."""

from __future__ import annotations

from locust import User, between

from harness.load.actor import Actor
from harness.load.recording import load_process


class DuplicatingUser(User):
    """Opens its Actor when it starts and closes it when it stops; scenarios add tasks
    that call `harness.load.flows` with `self.actor`."""

    abstract = True
    wait_time = between(0.0, 0.05)

    def on_start(self) -> None:
        self.actor = Actor(load_process(self.environment), self.host)

    def on_stop(self) -> None:
        self.actor.close()
