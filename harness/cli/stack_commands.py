"""The stack commands that span the registry or hold the terminal:
`harness status --all`, `harness down --all` and `harness up --foreground`.

`--all` reads the registry (`harness.stack.registry`), never the process table: every stack
this checkout started, the ones `harness up` left and the ones a run owns (under
`runs/<id>/stack`). An entry whose stack is gone is dropped on the way.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from harness.errors import HarnessError
from harness.process_handle import pid_alive
from harness.stack import registry
from harness.stack.local import StackError, open_stack

if TYPE_CHECKING:
    from harness.stack.protocol import Stack

FOREGROUND_POLL = 0.5


def live_stacks() -> list[tuple[dict[str, Any], Stack]]:
    """(registry entry, handle) of every registered stack that still runs."""
    found = []
    for entry in registry.registered_stacks():
        root = Path(entry["root"])
        try:
            stack = open_stack(root)
        except StackError:
            stack = None
        if stack is None:
            registry.unregister_stack(root)  # stopped (or died) without saying so
            continue
        found.append((entry, stack))
    return found


def describe(entry: dict[str, Any], stack: Stack) -> dict[str, Any]:
    info = stack.info
    owner = registry.Owner.from_json(entry.get("owner_process"))
    return {
        "root": entry["root"], "owner": entry.get("owner"), "mode": entry.get("mode"),
        "owner_pid": owner.pid, "owner_alive": owner.alive(), "phase": info.phase,
        "supervisor_pid": info.supervisor_pid, "app_url": info.app_url,
        "toxiproxy_url": info.toxiproxy_url, "proxy_prefix": info.proxy_prefix,
        "started_at": info.started_at,
    }


def status_all(*, as_json: bool, out: TextIO = sys.stdout) -> int:
    rows = [describe(entry, stack) for entry, stack in live_stacks()]
    if as_json:
        print(json.dumps({"registry": str(registry.registry_dir()), "stacks": rows}, indent=2), file=out)
        return 0
    if not rows:
        print(f"no stack is running (registry {registry.registry_dir()})", file=out)
        return 0
    print(f"{'OWNER':<10} {'MODE':<8} {'PHASE':<9} {'SUPERVISOR':>10}  APP URL                   ROOT", file=out)
    for row in rows:
        print(f"{row['owner'] or '?':<10} {row['mode'] or '?':<8} {row['phase'] or '?':<9} "
              f"{row['supervisor_pid'] or '-':>10}  {row['app_url'] or '-':<25} {row['root']}", file=out)
    return 0


def down_all(*, out: TextIO = sys.stdout) -> int:
    """Stop every registered stack; one that will not stop is named, the others still go."""
    failures = []
    stopped = 0
    for entry, stack in live_stacks():
        try:
            stack.down()
        except StackError as error:
            failures.append(f"{entry['root']}: {error}")
            continue
        registry.unregister_stack(Path(entry["root"]))
        stopped += 1
        print(f"stack in {entry['root']} ({entry.get('owner')}) stopped", file=out)
    # Faults whose owner died are healed even when no stack is left to pass by them.
    for line in registry.reclaim():
        print(f"reclaimed: {line}", file=out)
    if failures:
        raise StackError("could not stop: " + "; ".join(failures))
    if not stopped:
        print(f"no stack is running (registry {registry.registry_dir()})", file=out)
    return 0


def hold_in_foreground(stack: Stack, *, out: TextIO = sys.stderr) -> int:
    """Keep the stack until a signal (Ctrl-C, SIGTERM, SIGHUP) or until it dies; then stop it.

    The interrupt propagates (the CLI turns it into 128 + signal); a stack that died on
    its own is a harness failure.
    """
    print("harness: holding the stack in the foreground; Ctrl-C or SIGTERM stops it", file=out, flush=True)
    pid = stack.info.supervisor_pid
    try:
        while True:  # bounded by the stack's life: it ends on a signal or when the supervisor dies
            time.sleep(FOREGROUND_POLL)
            if isinstance(pid, int) and not pid_alive(pid):
                raise HarnessError(f"the stack's supervisor (pid {pid}) died; see {stack.root}/logs")
    finally:
        stack.down()
