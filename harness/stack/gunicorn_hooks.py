"""Gunicorn settings file for the stack's app: workers die with their master, and
start without importing the app again.

The supervisor gives the gunicorn master a parent-death signal; `post_fork` gives
each worker one too, so a SIGKILLed master cannot leave workers serving on the port.

`on_starting` imports the app's modules (Flask, redis-py, target_app) in the master,
before any worker is forked: a worker then finds them imported and only builds its
own app (`target_app.wsgi`: settings, Redis client, crash points), so a worker that
a crash point killed is serving again sooner (its imports were 0.25 s of CPU, on a
machine busy with the load). Nothing is built in the master: unlike gunicorn's
`--preload`, no app, connection or random state is shared between workers.
"""

from __future__ import annotations

import importlib
import signal

from harness.stack.services import set_parent_death_signal

# What a worker imports to build its app; the modules only, not target_app.wsgi
# (importing that builds an app).
WORKER_MODULES = ("target_app.app", "target_app.settings")


def on_starting(server: object) -> None:
    for module in WORKER_MODULES:
        importlib.import_module(module)


def post_fork(server: object, worker: object) -> None:
    set_parent_death_signal(signal.SIGKILL)
