"""The probe's configuration: YAML (or flags) → typed, checked dataclasses.

    upstream: 127.0.0.1:8000          # the service (flag --upstream wins)
    profile: ietf                     # ietf | conflict-409: the default expected codes
    key_header: Idempotency-Key
    headers: {Authorization: Bearer t}  # sent with every request (auth, tenant)
    endpoints:
      - name: create-order
        method: POST
        path: /api/v1/orders
        body: {sku: sku-1, quantity: 1, amount_cents: "{int:100-99999}", ref: "{uuid}"}
        mutate: amount_cents          # the field changed for the payload-mismatch duplicate
        requires_key: true
        id: {pointer: /id}            # or {header: Location}
        read: {path: /api/v1/orders/{id}}                 # optional: final read by id
        search: {path: /orders?key={key}, items: /items}  # optional: resources of a key
        expect: {created: [201], missing_key: 400, payload_mismatch: 422, in_flight: 409}
        key_lifetime: 24h             # optional: how long the service keeps a key (plan probe-clocks)
    strict: false          # true (or --strict): the draft's SHOULD rows fail the run too
    load: {users: 8, duration: 5s, seed: 7, client_timeout: 1s, max_attempts: 4,
           mix: {double_click: 0.35, replay: 0.3, payload_mismatch: 0.3, missing_key: 0.1,
                 impatient: 0.15}}
    plan: flaky-network    # optional: faults on proxy `app` (the probe's proxy)
    service: {command: [python, app.py, --port, "{port}"], ready: /healthz}  # instead of upstream:
    dependencies: {db: 127.0.0.1:5432}   # the service's own; each behind a proxy of the probe
    #   or {db: {address: 127.0.0.1:5432, protocol: postgres}}: the wire protocol (redis or
    #   postgres) lets the proxy see steps; the plan `every-step` requires it on every one

`service:` and `dependencies:` (the probe runs the service itself, on a port it picked,
behind proxies to its dependencies) are parsed by harness.probe.service_config.

A code written in `expect:` is the user's contract: a misuse answered otherwise fails
the run (`expected_codes`). A code left out comes from the profile, the draft's
SHOULD: a misuse answered otherwise is advice, and fails the run only when strict.

Generated fields in a body template: a string that is exactly `{uuid}`, `{int:A-B}`,
`{stripe_id:PREFIX}`, `{key}` (this request's Idempotency-Key) or `{choice:a|b|c}`
becomes a fresh value of that type per logical request; inside longer text every
generator becomes text, each drawn afresh (`pi_{int:1-9}`).

Every error is a `ProbeConfigError` (a HarnessError: exit 2) naming the file and the
field, e.g. `probe.yaml: endpoints[0].id: needs exactly one of pointer, header`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.bundled import plan_path
from harness.documents import load_yaml
from harness.errors import HarnessError
from harness.fieldcheck import FieldChecker
from harness.generators import is_generated as _mutable_field
from harness.generators import render_body as render_body  # moved to a leaf; users.py imports it from here
from harness.probe.dependency_process import DependencyProcess, parse_dependency_process
from harness.probe.messages.spec import MessageSpec, parse_message
from harness.probe.provider.spec import ProviderSpec, parse_provider
from harness.probe.service_config import ServiceConfig, parse_dependencies, parse_service
from harness.toxiproxy.steps import PROTOCOLS as DEPENDENCY_PROTOCOLS
from harness.webhooks.config import WebhookSpec, parse_webhook

METHODS = ("POST", "PUT", "PATCH", "DELETE")
# Default expected answers per profile. The IETF draft's Error Scenarios give 400 for
# a missing key, 422 for a key reused with another payload and 409 for a retry while
# the first request is in flight; many payment APIs (and this project's target app)
# answer a payload mismatch with 409 instead.
PROFILES: dict[str, dict[str, int]] = {
    "ietf": {"missing_key": 400, "payload_mismatch": 422, "in_flight": 409},
    "conflict-409": {"missing_key": 400, "payload_mismatch": 409, "in_flight": 409},
}
MISUSES = ("missing_key", "payload_mismatch", "in_flight")  # the misuses `expect:` gives a code for
MIX_KINDS = ("double_click", "replay", "payload_mismatch", "missing_key", "impatient", "cross_identity")
DEFAULT_MIX = {"double_click": 0.35, "replay": 0.3, "payload_mismatch": 0.3, "missing_key": 0.1,
               "impatient": 0.15, "cross_identity": 0.35}  # cross_identity: only with `identities:`
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9.-]+|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})$")


class ProbeConfigError(HarnessError):
    """A probe configuration that cannot be used; the message names the field."""


@dataclass(frozen=True)
class IdLocation:
    """Where an answer names the created resource: a JSON pointer or a header."""

    pointer: str | None = None
    header: str | None = None


@dataclass(frozen=True)
class ReadBack:
    """A URL path template (`{id}` or `{key}`) read after the load; `items` is the
    JSON pointer of the list in a search answer ("" = the body is the list)."""

    path: str
    items: str = ""
    expect: tuple[int, ...] = (200,)


@dataclass(frozen=True)
class Expectations:
    created: tuple[int, ...] = (200, 201)
    missing_key: int = 400
    payload_mismatch: int = 422
    in_flight: int = 409
    # The misuses whose code the config wrote (the user's contract, always checked);
    # the others' codes are the profile's (a SHOULD of the draft: advice unless strict).
    written: tuple[str, ...] = ()

    def is_written(self, misuse: str) -> bool:
        return misuse in self.written


@dataclass(frozen=True)
class EffectsSpec:
    """How the effects of a request are counted after the load (harness.probe.oracles):
    over HTTP (`path` with placeholders, then `count` or `items`, JSON pointers) or by
    SQL on the service's database (`dsn`, `query`). `params` are the placeholders the
    path or query uses: `key`, `id`, or a top-level field of the body."""

    path: str | None = None
    count: str | None = None
    items: str | None = None
    dsn: str | None = None
    query: str | None = None
    timeout: float = 5.0
    params: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        return "sql" if self.dsn is not None else "http"


@dataclass(frozen=True)
class Endpoint:
    name: str
    method: str
    path: str
    body: Any
    id: IdLocation
    expect: Expectations
    mutate: str | None = None
    requires_key: bool = True
    headers: Mapping[str, str] = field(default_factory=dict)
    read: ReadBack | None = None
    search: ReadBack | None = None
    effects: EffectsSpec | None = None
    key_lifetime: float | None = None  # seconds the service promises to keep a key (docs/clocks.md)


@dataclass(frozen=True)
class WebhookEndpoint:
    """A `webhooks:` entry: the provider's side (harness.webhooks.config: scheme, secret,
    event template, fact) and how the effects of a fact are counted (`{fact}`, `:fact`)."""

    spec: WebhookSpec
    effects: EffectsSpec | None = None

    def to_raw(self) -> dict[str, Any]:
        raw = self.spec.to_raw()
        if self.effects is not None:
            raw["effects"] = {k: v for k, v in asdict(self.effects).items() if v is not None and k != "params"}
        return raw


@dataclass(frozen=True)
class MessageEndpoint:
    """A `messages:` entry: what the probe publishes (harness.probe.messages.spec) and how
    the effects of a message's fact are counted (`{fact}`, `:fact`)."""

    spec: MessageSpec
    effects: EffectsSpec

    def to_raw(self) -> dict[str, Any]:
        return {**self.spec.to_raw(),
                "effects": {k: v for k, v in asdict(self.effects).items() if v is not None and k != "params"}}


@dataclass(frozen=True)
class LoadSpec:
    users: int = 8
    duration: float = 5.0
    seed: int = 7
    client_timeout: float = 1.0
    max_attempts: int = 4
    spawn_rate: float = 50.0
    mix: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))


@dataclass(frozen=True)
class ProbeConfig:
    endpoints: tuple[Endpoint, ...]
    upstream: str | None = None
    profile: str = "ietf"
    key_header: str = "Idempotency-Key"
    headers: Mapping[str, str] = field(default_factory=dict)
    load: LoadSpec = field(default_factory=LoadSpec)
    plan: Path | None = None
    source: str = "<config>"
    identities: tuple[Mapping[str, str], ...] = ()  # header maps, one per client identity
    webhooks: tuple[WebhookEndpoint, ...] = ()  # receivers the probe plays the provider for
    service: ServiceConfig | None = None  # the probe runs it (harness.probe.service_config)
    dependencies: Mapping[str, str] = field(default_factory=dict)  # NAME -> the real host:port
    # the dependencies the probe starts itself (`command:`), by name (harness.probe.dependency_process)
    dependency_processes: Mapping[str, DependencyProcess] = field(default_factory=dict)
    # a dependency's wire protocol (`protocol:`), for the steps its proxy parses (harness.toxiproxy.steps)
    dependency_protocols: Mapping[str, str] = field(default_factory=dict)
    messages: tuple[MessageEndpoint, ...] = ()  # what the probe publishes to a consumer (harness.probe.messages)
    provider: ProviderSpec | None = None  # the payment provider the probe runs (harness.probe.provider)
    strict: bool = False  # the draft's SHOULD rows count as failures (`strict: true`, --strict)

    def _dependency_raw(self, name: str, address: str) -> Any:
        """One `dependencies:` entry as the config wrote it (an address, or a mapping)."""
        protocol = self.dependency_protocols.get(name)
        if name in self.dependency_processes:
            raw = self.dependency_processes[name].to_raw()
            return {**raw, "protocol": protocol} if protocol else raw
        return {"address": address, "protocol": protocol} if protocol else address

    def to_dict(self) -> dict[str, Any]:
        """A plain form that `parse_config` reads back (the Locust processes get it)."""
        raw = asdict(self)
        raw["plan"] = str(self.plan) if self.plan is not None else None
        raw["endpoints"] = list(raw["endpoints"])
        for endpoint in raw["endpoints"]:
            endpoint["id"] = {k: v for k, v in endpoint["id"].items() if v is not None}
            # Only the codes the config wrote: read back, the others are the profile's again.
            expect = endpoint["expect"]
            endpoint["expect"] = {"created": list(expect["created"]),
                                  **{name: expect[name] for name in expect.pop("written")}}
            for name in ("read", "search"):
                if endpoint[name] is None:
                    del endpoint[name]
                else:
                    endpoint[name]["expect"] = list(endpoint[name]["expect"])
            if endpoint["mutate"] is None:
                del endpoint["mutate"]
            if endpoint["key_lifetime"] is None:
                del endpoint["key_lifetime"]
            if endpoint["effects"] is None:
                del endpoint["effects"]
            else:
                endpoint["effects"] = {k: v for k, v in endpoint["effects"].items()
                                       if v is not None and k != "params"}
        raw["identities"] = [dict(identity) for identity in self.identities]
        if not raw["identities"]:
            del raw["identities"]
        raw["webhooks"] = [webhook.to_raw() for webhook in self.webhooks]
        if not raw["webhooks"]:
            del raw["webhooks"]
        raw.pop("dependency_processes")
        raw.pop("dependency_protocols")
        raw["dependencies"] = {name: self._dependency_raw(name, address) for name, address in self.dependencies.items()}
        raw["service"] = self.service.to_dict() if self.service is not None else None
        raw["messages"] = [message.to_raw() for message in self.messages]
        if not raw["messages"]:
            del raw["messages"]
        raw["provider"] = self.provider.to_raw() if self.provider is not None else None
        if raw["provider"] is None:
            del raw["provider"]
        raw.pop("source")
        return raw


# --- parsing -------------------------------------------------------------------------

def load_config(path: Path) -> ProbeConfig:
    path = Path(path)
    raw = load_yaml(path, error=ProbeConfigError, what="the probe config")
    config = parse_config(raw, source=str(path))
    if config.plan is not None:
        config = replace(config, plan=_resolve_plan(config.plan, beside=path))
    if config.service is not None:
        config = replace(config, service=config.service.beside(path))
    if config.dependency_processes:
        config = replace(config, dependency_processes={name: process.beside(path) for name, process
                                                       in config.dependency_processes.items()})
    if any(message.spec.process is not None for message in config.messages):
        config = replace(config, messages=tuple(_process_beside(message, path) for message in config.messages))
    return config


def _process_beside(message: MessageEndpoint, config_file: Path) -> MessageEndpoint:
    """An owned broker's relative `cwd` taken relative to the config file's folder."""
    process = message.spec.process
    if process is None:
        return message
    return replace(message, spec=replace(message.spec, process=process.beside(config_file)))


def _resolve_plan(plan: Path, *, beside: Path) -> Path:
    """A plan file is relative to the config file, like an include; a bare name is a bundled plan."""
    relative = beside.parent / plan
    if not plan.is_absolute() and relative.is_file():
        return relative
    try:
        return plan_path(plan)
    except HarnessError as error:
        raise ProbeConfigError(f"{beside}: plan: {error}") from None


def parse_config(raw: Any, *, source: str = "<config>") -> ProbeConfig:
    where = _Where(source)
    top = where.mapping(raw, "config", optional=("endpoints", "upstream", "profile", "key_header", "headers", "load",
                                                 "plan", "webhooks", "identities", "service", "dependencies",
                                                 "messages", "provider", "strict"))
    profile = top.get("profile", "ietf")
    strict = top.get("strict", False)
    if not isinstance(strict, bool):
        raise where.error("strict", f"must be true or false, not {strict!r}")
    if not isinstance(profile, str) or profile not in PROFILES:
        raise where.error("profile", f"must be one of {', '.join(PROFILES)}, not {profile!r}")
    upstream = top.get("upstream")
    if upstream is not None:
        upstream = parse_upstream(upstream, where=where, path="upstream")
    key_header = where.header_name(top.get("key_header", "Idempotency-Key"), "key_header")
    headers = where.headers(top.get("headers"), "headers")
    messages = _parse_messages(where, top.get("messages"))
    webhooks = _parse_webhooks(where, top.get("webhooks"))
    endpoints_raw = top.get("endpoints", [] if messages or webhooks else None)
    if endpoints_raw is None:
        raise where.error("config", "missing endpoints (or messages), or webhooks")
    if not isinstance(endpoints_raw, list) or not (endpoints_raw or messages or webhooks):
        raise where.error("endpoints", "must be a non-empty list of endpoints")
    endpoints = tuple(_parse_endpoint(where, item, f"endpoints[{i}]", PROFILES[profile])
                      for i, item in enumerate(endpoints_raw))
    names = [endpoint.name for endpoint in endpoints]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise where.error("endpoints", f"names must be unique: {', '.join(duplicates)}")
    load = _parse_load(where, top.get("load"))
    plan = top.get("plan")
    if plan is not None and not isinstance(plan, str):
        raise where.error("plan", "must be the path of a fault plan file")
    identities = _parse_identities(where, top.get("identities"))
    provider = parse_provider(where, top["provider"]) if top.get("provider") is not None else None
    unknown = [name for name in (provider.endpoints if provider else ()) if name not in names]
    if unknown:
        raise where.error("provider.endpoints", f"names no endpoint: {unknown[0]!r} (endpoints: {', '.join(names)})")
    service, dependencies = _parse_service_section(where, top, upstream, provider=provider is not None)
    if provider is not None and service is None:
        raise where.error("provider", "needs `service:`: the probe hands the provider's URL to the service it "
                          "starts ({provider.url})")
    if service is not None and not service.listens and (endpoints or webhooks):
        raise where.error("service.command", "never tells the service its port ({port}), and the config sends "
                          "it HTTP requests (endpoints or webhooks)")
    if service is not None and service.ready.consumers is not None \
            and not any(message.spec.broker == "rabbitmq" for message in messages):
        raise where.error("service.ready.consumers", "counts the consumers of a RabbitMQ queue: needs a "
                          "`messages:` entry with `broker: rabbitmq` (on other brokers use `service.ready.log`)")
    return ProbeConfig(provider=provider, endpoints=endpoints, upstream=upstream, profile=profile, key_header=key_header,
                       headers=headers, load=load, plan=Path(plan) if plan else None, source=source,
                       identities=identities, webhooks=webhooks, service=service, dependencies=dependencies,
                       dependency_processes=_dependency_processes(where, top.get("dependencies"), dependencies),
                       dependency_protocols=_dependency_protocols(where, top.get("dependencies")),
                       messages=messages, strict=strict)


def _parse_service_section(where: _Where, top: Mapping[str, Any], upstream: str | None, *,
                           provider: bool = False) -> tuple[ServiceConfig | None, dict[str, str]]:
    dependencies = parse_dependencies(where, top.get("dependencies"),
                                      lambda raw, path: parse_upstream(raw, where=where, path=path))
    if top.get("service") is None:
        if dependencies:
            raise where.error("dependencies", "need `service:`: the probe hands the proxies' addresses "
                              "to the service it starts")
        return None, dependencies
    if upstream is not None:
        raise where.error("upstream", "not with `service:`: the probe runs the service on 127.0.0.1:{port} "
                          "and that is the upstream")
    return parse_service(where, top["service"], dependencies, provider=provider), dependencies


def _dependency_processes(where: _Where, raw: Any, addresses: Mapping[str, str]) -> dict[str, DependencyProcess]:
    """The `dependencies:` entries given with `command:` (already checked as addresses)."""
    if not isinstance(raw, dict):
        return {}
    processes = {}
    for name, value in raw.items():
        if not isinstance(value, dict):
            continue
        if "command" not in value:
            # An address the probe does not start, given as a mapping for its `protocol:`.
            where.mapping(value, f"dependencies.{name}", required=("address",), optional=("protocol",))
            continue
        value = {key: item for key, item in value.items() if key != "protocol"}
        processes[name] = parse_dependency_process(where, value, name, addresses[name])
    return processes


def _dependency_protocols(where: _Where, raw: Any) -> dict[str, str]:
    """`dependencies.NAME.protocol`: the wire protocol its proxy may parse (steps)."""
    if not isinstance(raw, dict):
        return {}
    protocols = {}
    for name, value in raw.items():
        if isinstance(value, dict) and "protocol" in value:
            protocol = value["protocol"]
            if protocol not in DEPENDENCY_PROTOCOLS:
                raise where.error(f"dependencies.{name}.protocol",
                                  f"must be one of {', '.join(DEPENDENCY_PROTOCOLS)} (the wire protocols whose "
                                  f"steps a proxy sees), not {protocol!r}")
            protocols[str(name)] = str(protocol)
    return protocols


def parse_upstream(raw: Any, *, where: _Where | None = None, path: str = "upstream") -> str:
    """`host:port` (a URL's scheme and path are refused: the proxy forwards TCP)."""
    where = where or _Where("--upstream")
    text = str(raw).strip() if isinstance(raw, (str, int)) else None
    match = _HOST_PORT.match(text or "")
    if match is None or not 0 < int(match["port"]) < 65536:
        raise where.error(path, f"must be host:port like 127.0.0.1:8000, not {raw!r}")
    return text  # type: ignore[return-value]


def simple_config(*, upstream: str | None, path: str, body: Any, method: str = "POST",
                  id_pointer: str | None = "/id", id_header: str | None = None,
                  read_path: str | None = None, profile: str = "ietf",
                  headers: Mapping[str, str] | None = None, mutate: str | None = None,
                  requires_key: bool = True) -> ProbeConfig:
    """The one-endpoint config of the command-line flags, checked like a file."""
    endpoint: dict[str, Any] = {
        "name": "endpoint", "method": method, "path": path, "body": body,
        "id": {"header": id_header} if id_header else {"pointer": id_pointer or ""},
        "requires_key": requires_key,
    }
    if mutate:
        endpoint["mutate"] = mutate
    if read_path:
        endpoint["read"] = {"path": read_path}
    raw = {"upstream": upstream, "profile": profile, "headers": dict(headers or {}),
           "endpoints": [endpoint]}
    return parse_config(raw, source="command line")


def _parse_endpoint(where: _Where, raw: Any, path: str, defaults: Mapping[str, int]) -> Endpoint:
    item = where.mapping(raw, path, required=("path", "body", "id"),
                         optional=("name", "method", "mutate", "requires_key", "headers", "read",
                                   "search", "expect", "effects", "key_lifetime"))
    name = item.get("name", f"endpoint-{path.split('[')[1].rstrip(']')}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise where.error(f"{path}.name", f"must be letters, digits, '.', '_' or '-', not {name!r}")
    method = str(item.get("method", "POST")).upper()
    if method not in METHODS:
        raise where.error(f"{path}.method", f"must be one of {', '.join(METHODS)}, not {item.get('method')!r}")
    url_path = where.url_path(item["path"], f"{path}.path")
    body = item["body"]
    if not isinstance(body, (dict, list)):
        raise where.error(f"{path}.body", "must be a JSON object or list (a template)")
    mutate = item.get("mutate")
    if mutate is not None:
        if not isinstance(body, dict) or not isinstance(mutate, str) or mutate not in body:
            raise where.error(f"{path}.mutate", f"must name a top-level field of body, not {mutate!r}")
    elif not _mutable_field(body):
        raise where.error(f"{path}.body", "needs a generated field ({uuid}, {int:A-B}, {choice:...}, {stripe_id:pi}) or "
                          "`mutate`: the payload-mismatch duplicate changes one field")
    requires_key = item.get("requires_key", True)
    if not isinstance(requires_key, bool):
        raise where.error(f"{path}.requires_key", f"must be true or false, not {requires_key!r}")
    id_raw = where.mapping(item["id"], f"{path}.id", optional=("pointer", "header"))
    if len(id_raw) != 1:
        raise where.error(f"{path}.id", "needs exactly one of pointer, header")
    if "pointer" in id_raw:
        pointer = id_raw["pointer"]
        if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
            raise where.error(f"{path}.id.pointer", f"must be a JSON pointer like /id, not {pointer!r}")
        id_location = IdLocation(pointer=pointer)
    else:
        id_location = IdLocation(header=where.header_name(id_raw["header"], f"{path}.id.header"))
    expect = _parse_expect(where, item.get("expect"), f"{path}.expect", defaults)
    key_lifetime = None
    if item.get("key_lifetime") is not None:
        key_lifetime = where.duration(item["key_lifetime"], f"{path}.key_lifetime")
        if key_lifetime <= 0:
            raise where.error(f"{path}.key_lifetime", "must be longer than 0s (how long the service keeps a key)")
    read = _parse_read(where, item.get("read"), f"{path}.read", "{id}")
    search = _parse_read(where, item.get("search"), f"{path}.search", "{key}")
    return Endpoint(name=name, method=method, path=url_path, body=body, id=id_location, expect=expect,
                    mutate=mutate, requires_key=requires_key,
                    headers=where.headers(item.get("headers"), f"{path}.headers"), read=read, search=search,
                    effects=_parse_effects(where, item.get("effects"), f"{path}.effects", body),
                    key_lifetime=key_lifetime)


def _parse_expect(where: _Where, raw: Any, path: str, defaults: Mapping[str, int]) -> Expectations:
    spec = where.mapping(raw or {}, path, optional=("created", *MISUSES))
    created = spec.get("created", [200, 201])
    if isinstance(created, int) and not isinstance(created, bool):
        created = [created]
    if not isinstance(created, list) or not created or not all(where.status(c, f"{path}.created") // 100 == 2
                                                                for c in created):
        raise where.error(f"{path}.created", "must be a 2xx status or a list of them")
    codes = {name: where.status(spec.get(name, defaults[name]), f"{path}.{name}")
             for name in MISUSES}
    for name, code in codes.items():
        if code // 100 != 4:
            raise where.error(f"{path}.{name}", f"must be a 4xx status, not {code}")
    return Expectations(created=tuple(created), **codes, written=tuple(name for name in MISUSES if name in spec))


def _parse_read(where: _Where, raw: Any, path: str, placeholder: str) -> ReadBack | None:
    if raw is None:
        return None
    spec = where.mapping(raw, path, required=("path",), optional=("items", "expect"))
    url_path = where.url_path(spec["path"], f"{path}.path")
    if placeholder not in url_path:
        raise where.error(f"{path}.path", f"must contain {placeholder}")
    items = spec.get("items", "")
    if not isinstance(items, str) or (items and not items.startswith("/")):
        raise where.error(f"{path}.items", f"must be a JSON pointer like /items, not {items!r}")
    expect = spec.get("expect", [200])
    if isinstance(expect, int):
        expect = [expect]
    if not isinstance(expect, list) or not expect:
        raise where.error(f"{path}.expect", "must be a status or a list of them")
    return ReadBack(path=url_path, items=items,
                    expect=tuple(where.status(code, f"{path}.expect") for code in expect))


def _parse_load(where: _Where, raw: Any) -> LoadSpec:
    spec = where.mapping(raw or {}, "load", optional=("users", "duration", "seed", "client_timeout",
                                                      "max_attempts", "spawn_rate", "mix"))
    users = where.integer(spec.get("users", 8), "load.users", minimum=1)
    seconds = where.duration(spec.get("duration", "5s"), "load.duration")
    if seconds < 1:
        raise where.error("load.duration", "must be at least 1s")
    timeout = where.duration(spec.get("client_timeout", "1s"), "load.client_timeout")
    if timeout <= 0:
        raise where.error("load.client_timeout", "must be longer than 0s")
    mix_raw = where.mapping(spec.get("mix") or {}, "load.mix", optional=MIX_KINDS)
    mix = dict(DEFAULT_MIX)
    for name, value in mix_raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise where.error(f"load.mix.{name}", f"must be a share between 0 and 1, not {value!r}")
        mix[name] = float(value)
    spawn_rate = spec.get("spawn_rate", 50)
    if isinstance(spawn_rate, bool) or not isinstance(spawn_rate, (int, float)) or spawn_rate <= 0:
        raise where.error("load.spawn_rate", f"must be a positive number, not {spawn_rate!r}")
    return LoadSpec(users=users, duration=seconds, seed=where.integer(spec.get("seed", 7), "load.seed"),
                    client_timeout=timeout,
                    max_attempts=where.integer(spec.get("max_attempts", 4), "load.max_attempts", minimum=1),
                    spawn_rate=float(spawn_rate), mix=mix)


# --- identities and effects (harness.probe.identities, harness.probe.oracles) ------------

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SQL_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")


def _parse_identities(where: _Where, raw: Any) -> tuple[dict[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) < 2:
        raise where.error("identities", "must be a list of at least two header maps, "
                          "e.g. [{Authorization: Bearer alice}, {Authorization: Bearer bob}]")
    identities = tuple(where.headers(item, f"identities[{i}]") for i, item in enumerate(raw))
    for i, identity in enumerate(identities):
        if not identity:
            raise where.error(f"identities[{i}]", "must name at least one header")
        if identity in identities[:i]:
            raise where.error(f"identities[{i}]", "is the same as an earlier identity")
    return identities


def _parse_effects(where: _Where, raw: Any, path: str, body: Any) -> EffectsSpec | None:
    if raw is None:
        return None
    spec = where.mapping(raw, path, optional=("path", "count", "items", "dsn", "query", "timeout"))
    fields = set(body) if isinstance(body, dict) else set()
    if "dsn" in spec or "query" in spec:
        if "path" in spec or "count" in spec or "items" in spec:
            raise where.error(path, "is either SQL (dsn, query) or HTTP (path, count or items), not both")
        dsn, query = spec.get("dsn"), spec.get("query")
        if not isinstance(dsn, str) or not dsn.startswith(("postgresql://", "postgres://", "sqlite:///")):
            raise where.error(f"{path}.dsn", f"must be a postgresql://... or sqlite:///path URL, not {dsn!r}")
        if not isinstance(query, str) or not query.strip():
            raise where.error(f"{path}.query", "must be an SQL query with :key, :id or a body field as parameter")
        params = tuple(dict.fromkeys(_SQL_PARAM.findall(query)))
        where_params = f"{path}.query"
        timeout = where.duration(spec.get("timeout", "5s"), f"{path}.timeout")
        if timeout <= 0:
            raise where.error(f"{path}.timeout", "must be longer than 0s")
        effects = EffectsSpec(dsn=dsn, query=query, timeout=timeout, params=params)
    else:
        if "path" not in spec:
            raise where.error(path, "needs path (HTTP) or dsn and query (SQL)")
        url_path = where.url_path(spec["path"], f"{path}.path")
        params = tuple(dict.fromkeys(_PLACEHOLDER.findall(url_path)))
        where_params = f"{path}.path"
        if ("count" in spec) == ("items" in spec):
            raise where.error(path, "needs exactly one of count, items (JSON pointers)")
        name = "count" if "count" in spec else "items"
        pointer = spec[name]
        if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
            raise where.error(f"{path}.{name}", f"must be a JSON pointer like /{name}, not {pointer!r}")
        effects = EffectsSpec(path=url_path, count=pointer if name == "count" else None,
                              items=pointer if name == "items" else None, params=params)
    if not params:
        raise where.error(where_params, "needs a parameter: :key / {key}, :id / {id} or a body field")
    unknown = [name for name in params if name not in ("key", "id") and name not in fields]
    if unknown:
        raise where.error(where_params, f"parameter {unknown[0]!r} is neither key, id nor a top-level field of body")
    return effects


def _parse_webhooks(where: _Where, raw: Any) -> tuple[WebhookEndpoint, ...]:
    """`webhooks:` entries (harness.webhooks.config checks each); `effects` take the fact as parameter."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise where.error("webhooks", "must be a non-empty list of webhook endpoints")
    webhooks = []
    for i, item in enumerate(raw):
        path = f"webhooks[{i}]"
        spec = parse_webhook(where, item, path, also=("effects",))
        webhooks.append(WebhookEndpoint(spec=spec, effects=_fact_effects(where, item, path)))
    _unique_names(where, "webhooks", [webhook.spec.name for webhook in webhooks])
    return tuple(webhooks)


def _parse_messages(where: _Where, raw: Any) -> tuple[MessageEndpoint, ...]:
    """`messages:` entries (harness.probe.messages.spec checks each); `effects` take the fact as parameter."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise where.error("messages", "must be a non-empty list of message sources")
    messages = []
    for i, item in enumerate(raw):
        path = f"messages[{i}]"
        spec = parse_message(where, item, path, also=("effects",))
        effects = _fact_effects(where, item, path)
        if effects is None:
            raise where.error(f"{path}.effects", "is required: how the effects of a message's fact are counted")
        messages.append(MessageEndpoint(spec=spec, effects=effects))
    _unique_names(where, "messages", [message.spec.name for message in messages])
    # Owned brokers are plan targets by their names: one name, one process.
    owned = [message.spec.process.name for message in messages if message.spec.process is not None]
    if len(set(owned)) < len(owned):
        raise where.error("messages", "every `process:` needs a name of its own (a plan names it): "
                          + ", ".join(sorted({name for name in owned if owned.count(name) > 1})))
    return tuple(messages)


def _fact_effects(where: _Where, item: Mapping[str, Any], path: str) -> EffectsSpec | None:
    """An entry's `effects`, counted by its fact: the fact must be the one parameter."""
    effects = _parse_effects(where, item.get("effects"), f"{path}.effects", {"fact": None})
    if effects is not None and effects.params != ("fact",):
        field_name = "query" if effects.kind == "sql" else "path"
        raise where.error(f"{path}.effects.{field_name}",
                          "must take the fact as its one parameter: {fact} in a path, :fact in a query")
    return effects


def _unique_names(where: _Where, field: str, names: list[str]) -> None:
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise where.error(field, f"names must be unique: {', '.join(duplicates)}")


class _Where(FieldChecker):
    """Field checks that raise ProbeConfigError with the source and the field's path."""

    def __init__(self, source: str) -> None:
        super().__init__(source, ProbeConfigError)

    def status(self, raw: Any, path: str) -> int:
        if isinstance(raw, bool) or not isinstance(raw, int) or not 100 <= raw <= 599:
            raise self.error(path, f"must be an HTTP status code (100-599), not {raw!r}")
        return raw

    def url_path(self, raw: Any, path: str) -> str:
        if not isinstance(raw, str) or not raw.startswith("/") or any(c.isspace() for c in raw):
            raise self.error(path, f"must be a URL path starting with /, not {raw!r}")
        return raw

    def header_name(self, raw: Any, path: str) -> str:
        if not isinstance(raw, str) or not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", raw):
            raise self.error(path, f"must be an HTTP header name, not {raw!r}")
        return raw

    def headers(self, raw: Any, path: str) -> dict[str, str]:
        if raw is None:
            return {}
        spec = self.mapping(raw, path, optional=tuple(raw) if isinstance(raw, dict) else ())
        result = {}
        for name, value in spec.items():
            self.header_name(name, f"{path}.{name}")
            if not isinstance(value, (str, int)) or "\n" in str(value) or "\r" in str(value):
                raise self.error(f"{path}.{name}", "must be a one-line string")
            result[str(name)] = str(value)
        return result


# --- body templates --------------------------------------------------------------------

def mutate_body(template: Any, body: Any, endpoint: Endpoint, rng: random.Random) -> Any:
    """`body` with one field changed: the payload of a key-reuse-with-another-body.

    The field is `endpoint.mutate`, else the first generated top-level field; its new
    value differs from the old one for sure (an int is moved by one, text extended)."""
    if not isinstance(body, dict):
        return [*body, "mismatch"] if isinstance(body, list) else body
    name = endpoint.mutate or next(
        (field_name for field_name, value in template.items() if _mutable_field(value)), None)
    if name is None:
        return {**body, "_probe_mismatch": True}
    value = body.get(name)
    if isinstance(value, bool):
        changed: Any = not value
    elif isinstance(value, int):
        changed = value + 1
    elif isinstance(value, float):
        changed = value + 1.0
    elif isinstance(value, str):
        changed = value + "-x"
    else:
        changed = rng.random()
    return {**body, name: changed}
