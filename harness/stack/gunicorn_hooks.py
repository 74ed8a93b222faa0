"""Gunicorn settings file for the stack's app: workers die with their master.

The supervisor gives the gunicorn master a parent-death signal; this hook gives each
worker one too, so a SIGKILLed master cannot leave workers serving on the port.
"""

from __future__ import annotations

import signal

from harness.stack.services import set_parent_death_signal


def post_fork(server: object, worker: object) -> None:
    set_parent_death_signal(signal.SIGKILL)
