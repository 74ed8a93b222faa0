"""Did every service that died on its own come back? Asked once the load has stopped.

A crashed app worker is replaced by gunicorn's master, a crashed app or consumer by
the local supervisor (or docker's `restart:` policy under compose). A service that
died and is still down when the load has stopped, after `timeout` seconds to finish
a restart in progress, makes the run a harness failure (`ServicesNotBack`, exit 2):
its verdict would judge a stack that was not whole, so it is never a PASS.

Only a death nobody asked for counts. A service killed, stopped or paused through
the stack (a process fault of the nemesis) is `killed`, `stopped` or `paused`
locally, and the nemesis's own heal has started it again before this question is
asked (harness/run/runner.py asks it just before healing every fault, so the heal's
`start` cannot hide a service that never came back by itself).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from harness.stack.info import StackError
from harness.stack.protocol import ServiceStatus, Stack

# Statuses of a service that is down without having been asked to be: the local
# supervisor's `exited` / `restarting`, docker's words for a container that is not up.
DOWN_ON_ITS_OWN = frozenset({"exited", "restarting", "dead", "created", "missing", "removing"})
DEFAULT_TIMEOUT = 15.0


class ServicesNotBack(StackError):
    """Services that died on their own were not back when the load had stopped."""


def not_back(rows: Iterable[ServiceStatus]) -> list[ServiceStatus]:
    """The services of `rows` that are down on their own."""
    return [row for row in rows if row["status"] in DOWN_ON_ITS_OWN]


def require_services_back(stack: Stack, *, timeout: float = DEFAULT_TIMEOUT, interval: float = 0.25) -> None:
    """Return once no service is down on its own; raise ServicesNotBack naming each
    one still down after `timeout` seconds (restarts in progress get that long)."""
    deadline = time.monotonic() + timeout
    while True:
        down = not_back(stack.services())
        if not down:
            return
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    raise ServicesNotBack(f"service(s) that died during the run did not come back within {timeout:g} s: "
                          f"{describe_down(down)}; see the stack's logs")


def describe_down(rows: Iterable[ServiceStatus]) -> str:
    """`redis (exited), app (restarting, 2 restart(s))`: each service with its status."""
    return ", ".join(
        f"{row['name']} ({row['status']}" + (f", {row.get('restarts')} restart(s)" if row.get("restarts") else "")
        + ")"
        for row in rows)
