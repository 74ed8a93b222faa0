"""The Locust user every scenario builds on: one Actor (a recorded client) per user."""

from __future__ import annotations

import random

from locust import User

from harness.load.actor import Actor
from harness.load.recording import load_process


class DuplicatingUser(User):
    """Opens its Actor when it starts and closes it when it stops; scenarios add tasks
    that call `harness.load.flows` with `self.actor`."""

    abstract = True

    def wait_time(self) -> float:
        # The load's --harness-think-time (LoadSettings.think_time), read per wait:
        # the web UI's form may change it between two starts.
        low, high = load_process(self.environment).settings.think_time
        return random.uniform(low, high)

    def on_start(self) -> None:
        self.actor = Actor(load_process(self.environment), self.host)

    def on_stop(self) -> None:
        self.actor.close()
