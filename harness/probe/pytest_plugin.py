"""The harness's pytest plugin (entry point `pytest11`: installed with the package).

Fixtures:
- `toxiproxy` (session): a Toxiproxy for the session, `TOXIPROXY_URL` when set, else
  the embedded server on a free loopback port; a `ToxiproxyHandle` (url, embedded).
- `chaos_stack`: the harness's own stack (target app, Redis, consumers behind
  Toxiproxy) started with `harness.stack.local.start_stack` in a temporary root and
  stopped after the test: a `harness.stack.protocol.Stack` whose `.info` is the
  stack's state.json as a `harness.stack.info.StackInfo` (`stack.info.app_url`,
  `stack.info.redis_url`, ...); `@pytest.mark.chaos_stack(app_workers=2,
  consumers=1, unsafe_disable="api")` sets it up.
- `idempotency_probe`: a function `probe(upstream, config=None, **options)` that
  runs `harness probe` against `host:port` (or `http://host:port`) through the
  session's Toxiproxy and returns the `ProbeResult` (verdict, violations, run_dir,
  summary()). `@pytest.mark.probe_config("probe.yaml", duration=3, plan=...)` gives
  the defaults. `probe(config=..., service={"command": [...], "ready": "/healthz"},
  dependencies={"db": "127.0.0.1:5432"})` (no upstream) has the probe run the
  service itself, as a config's `service:` and `dependencies:` do. `probe(upstream,
  webhooks=[...])` probes a webhook receiver (the config's `webhooks:`, alone or beside
  the endpoints): the harness plays the provider. `probe(service=..., dependencies=...,
  messages=[...])` probes a message consumer (the config's `messages:`, alone or beside
  the endpoints): the probe publishes with duplicates on purpose, and a plan such as
  `probe-redelivery` provokes redeliveries. `provider={...}` adds the config's
  `provider:` (a payment provider behind the proxy `provider`, its ledger judged:
  money_moved_once, ...).
- `payment_provider`: a Stripe-compatible `harness.provider.server.EmbeddedProvider`
  started for the test on a free loopback port and stopped after it (`.url` for the
  SDK's api base, `.add_fault(...)`, `.ledger.records()`).

Markers: `chaos` (a test that injects faults; deselect with `-m "not chaos"`),
`chaos_stack(...)`, `probe_config(...)`.

    import pytest

    @pytest.mark.chaos
    def test_payments_are_idempotent(idempotency_probe, my_service):
        result = idempotency_probe(my_service.address, "probe.yaml", plan="probe")
        assert result.passed, result.summary()

Imports of the harness happen inside the fixtures, so loading the plugin costs a
test session nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # imported in the fixtures: loading the plugin costs nothing
    from harness.stack.protocol import Stack


@dataclass(frozen=True)
class ToxiproxyHandle:
    url: str
    embedded: bool


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: a test that injects faults (harness); deselect with -m 'not chaos'")
    config.addinivalue_line("markers", "chaos_stack(app_workers=2, consumers=1, unsafe_disable=''): "
                                       "settings of the chaos_stack fixture")
    config.addinivalue_line("markers", "probe_config(config=None, **options): defaults of the "
                                       "idempotency_probe fixture (config path or dict, plan, duration, users, seed)")


@pytest.fixture(scope="session")
def toxiproxy() -> Iterator[ToxiproxyHandle]:
    """`TOXIPROXY_URL` when set, else the embedded Toxiproxy for the whole session."""
    url = os.environ.get("TOXIPROXY_URL", "").strip()
    if url:
        yield ToxiproxyHandle(url=url if "://" in url else f"http://{url}", embedded=False)
        return
    from harness.toxiproxy.server import EmbeddedToxiproxy

    server = EmbeddedToxiproxy().start()
    try:
        yield ToxiproxyHandle(url=server.url, embedded=True)
    finally:
        server.stop()


@pytest.fixture
def chaos_stack(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The harness stack (a Stack: `.info.app_url`, `.info.app_direct_url`, ...)."""
    from harness.stack.local import StackSettings, start_stack

    marker = request.node.get_closest_marker("chaos_stack")
    options = dict(marker.kwargs) if marker else {}
    unsafe = options.pop("unsafe_disable", "")
    env = {"TARGET_APP_UNSAFE_DISABLE": unsafe} if unsafe else {}
    settings = StackSettings(root=tmp_path_factory.mktemp("chaos-stack"),
                             app_workers=options.pop("app_workers", 2), consumers=options.pop("consumers", 1),
                             env=env, toxiproxy_url=os.environ.get("TOXIPROXY_URL") or None, **options)
    stack = start_stack(settings)
    try:
        yield stack
    finally:
        stack.down()


@pytest.fixture
def payment_provider() -> Iterator[Any]:
    """An EmbeddedProvider (harness.provider) for the test: `.url`, `.add_fault`, `.ledger`."""
    from harness.provider.server import EmbeddedProvider, ProviderConfig

    provider = EmbeddedProvider(ProviderConfig(seed=0)).start()
    try:
        yield provider
    finally:
        provider.stop()


@pytest.fixture
def idempotency_probe(request: pytest.FixtureRequest, toxiproxy: ToxiproxyHandle,
                      tmp_path: Path) -> Callable[..., Any]:
    """`probe(upstream=None, config=None, *, plan=None, duration=None, users=None, seed=None,
    min_acknowledged=None, service=None, dependencies=None, identities=None, effects=None, webhooks=None,
    messages=None, **simple)` → ProbeResult. `config` is a YAML path, a dict in the config's format, or
    None with `path=`/`body=` (the flags of `harness probe`); with `service=` there is no
    upstream to give. `identities=` is the config's `identities:` (a list of header maps);
    `effects=` an endpoint's `effects:` for every endpoint, or {endpoint name: effects};
    `webhooks=` the config's `webhooks:` (a list of entries; alone, no endpoint is needed);
    `messages=` the config's `messages:` (a list of entries, each with its `effects:`; alone,
    no endpoint is needed: give the consumer as `service=` and its broker link as `dependencies=`);
    `provider=` the config's `provider:` (a dict, or True for its defaults): the probe runs a
    payment provider for the service (`{provider.url}`) and judges its ledger. `strict=True` is
    `harness probe --strict`: the draft's SHOULD rows fail the run too (harness.probe.levels)."""
    from harness.bundled import plan_path
    from harness.probe.checker import DEFAULT_MIN_ACKNOWLEDGED
    from harness.probe.config import load_config, parse_config, parse_upstream, simple_config
    from harness.probe.runner import ProbeSpec, run_probe

    marker = request.node.get_closest_marker("probe_config")
    defaults: dict[str, Any] = dict(marker.kwargs) if marker else {}
    if marker and marker.args:
        defaults.setdefault("config", marker.args[0])
    runs = iter(range(1, 1000))

    def probe(upstream: str | None = None, config: Any = None, **options: Any) -> Any:
        merged = {**defaults, **options}
        config = config if config is not None else merged.pop("config", None)
        merged.pop("config", None)
        address = parse_upstream(upstream.split("://", 1)[-1].rstrip("/")) if upstream else None
        # `service=` (the config's `service:`, or just its command as a list) and
        # `dependencies=`: the probe runs the service itself (harness.probe.service).
        service = merged.pop("service", None)
        service = {"command": service} if isinstance(service, (list, tuple)) else service
        dependencies = merged.pop("dependencies", None)
        identities, effects = merged.pop("identities", None), merged.pop("effects", None)
        webhooks = merged.pop("webhooks", None)  # the config's `webhooks:` (harness.probe.webhooks)
        messages = merged.pop("messages", None)  # the config's `messages:` (harness.probe.messages)
        provider = merged.pop("provider", None)  # the config's `provider:` (True: its defaults)
        provider = {} if provider is True else provider
        plan = merged.pop("plan", None)
        strict = merged.pop("strict", None)
        overrides = {name: merged.pop(name) for name in ("duration", "users", "seed") if name in merged}
        min_acknowledged = merged.pop("min_acknowledged", DEFAULT_MIN_ACKNOWLEDGED)
        if isinstance(config, (str, Path)):
            parsed = load_config(Path(config))
        elif isinstance(config, dict):
            parsed = parse_config(config, source="idempotency_probe")
        elif (webhooks is not None or messages is not None) and not merged:  # no endpoint flags
            alone = {name: value for name, value in (("webhooks", webhooks), ("messages", messages))
                     if value is not None}
            parsed = parse_config(alone, source="idempotency_probe")
            webhooks = messages = None
        else:
            parsed = simple_config(upstream=address, **merged)
        if service is not None or dependencies is not None or provider is not None:
            # Checked as a config file's sections are (one error naming the field).
            sections = ({"service": service, "dependencies": dependencies}
                        if service is not None or dependencies is not None else {})
            parsed = parse_config({**parsed.to_dict(), **sections,
                                   **({"provider": provider} if provider is not None else {})},
                                  source="idempotency_probe")
        if webhooks is not None:
            parsed = parse_config({**parsed.to_dict(), "webhooks": webhooks}, source="idempotency_probe")
        if messages is not None:
            parsed = parse_config({**parsed.to_dict(), "messages": messages}, source="idempotency_probe")
        if identities is not None or effects is not None:
            from harness.probe.effects import with_effects

            raw = parsed.to_dict()
            if identities is not None:
                raw["identities"] = identities
            parsed = parse_config(with_effects(raw, effects), source="idempotency_probe")
        parsed = replace(parsed, load=replace(parsed.load, **overrides))
        if strict is not None:
            parsed = replace(parsed, strict=bool(strict))
        spec = ProbeSpec(config=parsed, out_dir=tmp_path / f"probe-{next(runs)}", upstream=address,
                         toxiproxy_url=toxiproxy.url, plan=plan_path(plan) if plan else None,  # a name or a file
                         min_acknowledged=min_acknowledged)
        return run_probe(spec)

    return probe
