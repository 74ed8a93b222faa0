"""The harness inside Locust's own web UI: a "Chaos" tab, and judging a swarm the
harness did not start.

- `harness.webui.session`: a swarm's run directory (baseline before, verdict after),
  shared by `harness swarm begin` / `harness check --stack` and the Chaos tab.
- `harness.webui.chaos`: the Chaos tab; a locustfile installs it with one line,
  `harness.webui.install(events)`, and it is active only on the process that runs the
  web UI (a master or a standalone runner), never on a worker.
- `harness.webui.guard`: what keeps the tab to its own page and user (loopback by
  default, JSON + token + same origin on every change, `--web-login`; docs/security.md).

Details: docs/webui.md.
"""

from __future__ import annotations

from typing import Any


def install(events: Any) -> None:
    """Register the Chaos tab's listeners (imported lazily: the CLI needs no Flask)."""
    from harness.webui.chaos import install as install_chaos

    install_chaos(events)
