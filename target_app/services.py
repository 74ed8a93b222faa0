"""What the routes work with, built once per app by `create_app`.

`Services` holds the settings, the text Redis client, the domain, the
inventory seeder and the process's crash points. `install(app, services)` stores it in `app.extensions`;
`services()` returns it for the current app (inside a request or app context),
`services_of(app)` for a given app. Nothing here is module-level state: two apps
in one process have two independent Services.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

import redis
from flask import Flask, current_app

from target_app.crashpoints import CrashPoints
from target_app.domain import Domain
from target_app.settings import Settings

# The app.extensions entry of this app's Services (Flask's convention for extensions).
EXTENSION = "target_app"


class InventorySeeder:
    """Seeds the inventory once per app; retried on a later request if Redis was down."""

    def __init__(self, domain: Domain, inventory: Mapping[str, int]) -> None:
        self.domain, self.inventory, self.done = domain, dict(inventory), False
        self._lock = threading.Lock()

    def ensure(self) -> None:
        if self.done:
            return
        with self._lock:
            if not self.done:
                self.domain.seed_inventory(self.inventory)
                self.done = True


@dataclass(frozen=True)
class Services:
    settings: Settings
    redis: redis.Redis
    domain: Domain
    seeder: InventorySeeder
    crash_points: CrashPoints


def install(app: Flask, services: Services) -> None:
    app.extensions[EXTENSION] = services


def services_of(app: Flask) -> Services:
    found = app.extensions.get(EXTENSION)
    if not isinstance(found, Services):
        raise TypeError("this app was not built by target_app.app.create_app")
    return found


def services() -> Services:
    """The current app's Services (needs an app or request context)."""
    return services_of(current_app)
