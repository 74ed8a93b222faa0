"""A run's janitor: `python -m harness.stack.janitor --lease FILE`, started by
`harness.stack.lifeline.RunGuard` in a session of its own with the run's lifeline as
its standard input.

It blocks until end-of-file on the lifeline (the harness finished, or died however it
died). If the lease file is gone then, the run finished and removed it: nothing to do.
Otherwise it reads the lease and undoes what the lease still holds
(`harness.stack.registry.heal_lease`), then removes the lease once everything is
settled. SIGINT, SIGTERM and SIGHUP are ignored: a Ctrl-C or a signal to the harness
must not stop the one process left to clean up after it.

Why a module of its own, importing only the standard library at the top: every run
starts one, and most of them never act. The registry (and with it requests and the
Toxiproxy client) is imported only once there is a lease to heal, so a janitor that
has nothing to do costs a Python start and no more.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

# What the harness treats as a request to stop (harness.stack.lifeline turns them into
# Interrupted) and the janitor ignores: a Ctrl-C or signal to the harness is not for it.
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def janitor(lease_file: Path, lifeline_fd: int = 0) -> int:
    """Wait for end-of-file on the lifeline, then undo whatever the lease still holds."""
    for signum in HANDLED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    while True:
        try:
            if not os.read(lifeline_fd, 4096):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    if not lease_file.exists():
        return 0  # the harness finished and removed its lease: nothing to do
    from harness.stack import registry

    lease = registry.read_lease(lease_file)
    if lease is None:
        return 0  # not a lease the registry wrote (or removed meanwhile): nothing to act on
    print(f"lifeline: the harness (pid {lease.owner.pid}) died; cleaning up", file=sys.stderr, flush=True)
    done, settled = registry.heal_lease(lease, registry.live_claims(exclude=lease.id))
    for line in done:
        print(f"lifeline: {line}", file=sys.stderr, flush=True)
    if settled:
        registry.remove_lease(lease.id)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.stack.janitor")
    parser.add_argument("--lease", type=Path, required=True)
    args = parser.parse_args(argv)
    return janitor(args.lease)


if __name__ == "__main__":
    sys.exit(main())
