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

from harness.webui.options import TAB_ATTRIBUTE, add_options


def install(events: Any) -> None:
    """Register the Chaos tab's options and listeners. The tab itself
    (harness.webui.chaos) is imported only at the init of a process that serves the
    web UI: the CLI needs no Flask, and a headless Locust starts without it.

    Its test_start listener is registered here, at the locustfile's import, so that it
    runs before the recording's (it names the run's history directory first)."""

    def _options(parser: Any, **_: Any) -> None:
        add_options(parser)

    def _init(environment: Any, **_: Any) -> None:
        if environment.web_ui is None:
            return
        from harness.webui.chaos import on_init

        on_init(environment)

    def _start(environment: Any, **_: Any) -> None:
        tab = getattr(environment, TAB_ATTRIBUTE, None)
        if tab is not None:
            tab.on_test_start()

    events.init_command_line_parser.add_listener(_options)
    events.init.add_listener(_init)
    events.test_start.add_listener(_start)
