"""The probe config's `service:` and `dependencies:` sections: parsed, checked, rendered.

    service:
      command: [python, app.py, --port, "{port}", --db, "postgresql://u@{dependency.db}/app"]
      env: {REDIS_URL: "redis://{dependency.cache}/0"}   # added to the probe's environment
      cwd: ../service            # relative to the config file; default: the current directory
      ready: {path: /healthz, timeout: 20s}               # or `ready: /healthz`,
                                 # `{log: "celery@.* ready"}`, `{consumers: 1}` (a worker)
    dependencies:
      db: 127.0.0.1:5432         # NAME: the real host:port; the service gets a proxy's
      cache: 127.0.0.1:6379
      store: {address: 127.0.0.1:6380, command: [redis-server, --port, "6380"]}   # one the probe starts
                                 # (harness.probe.dependency_process)

Placeholders, in `command` and in `env` values: `{port}` (a free loopback port the probe
picked; the service must listen on 127.0.0.1 there, and that is the probe's upstream,
so `upstream:` is refused beside `service:`), `{dependency.NAME}` (host:port of the
Toxiproxy proxy in front of dependency NAME), `{dependency.NAME.host}` and
`{dependency.NAME.port}` (its two halves), and with a `provider:` section `{provider.url}`
(http://host:port of the proxy `provider` in front of the payment provider the probe
runs, harness.probe.provider). Any other text in braces is left as it is.
A placeholder naming an unknown dependency, a service that is never told `{port}`
and `dependencies:` without `service:` (nobody would use the proxies) are errors.

Without `ready`, the service counts as ready once its port accepts TCP connections;
with a path, once GET path answers 2xx; with `log: PATTERN` (a regular expression), once
a line its process wrote since this start matches; with `consumers: N`, once every
RabbitMQ queue of the config's `messages:` has at least N consumers (a worker has no
HTTP port: with `log` or `consumers` the service need not be told `{port}`, unless the
config sends it HTTP requests, harness.probe.config). One of `path`, `log`,
`consumers`. The timeout (default 20 s) bounds the first start and every start after
a process fault.

Dependency names are how fault plans address the proxies (harness.probe.plan_targets),
so they are plan names (lowercase letters, digits, '-', '_') and none of the names a
probe plan already gives a meaning: `app`, `service`, `dependencies`, `provider`.

The parsers take the config's `FieldChecker`, so every error is the config's own
one-line error naming the field (`probe.yaml: service.ready.timeout: ...`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.fieldcheck import FieldChecker

SERVICE_KEYS = ("command", "env", "cwd", "ready")
DEFAULT_READY_TIMEOUT = 20.0
# Names a probe plan gives a meaning of their own (harness.probe.plan_targets).
RESERVED_NAMES = ("app", "service", "dependencies", "provider")
_PLAN_TARGET_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER = re.compile(r"\{(port|provider\.url|dependency\.([^{}.]*)(?:\.(host|port))?)\}")
PROVIDER = "provider"  # the payment provider's proxy among the rendered addresses (`{provider.url}`)


@dataclass(frozen=True)
class ReadyCheck:
    """When a started service is ready, within `timeout` seconds: GET `path` answers
    2xx, or a line of its log since the start matches `log`, or its queues have
    `consumers` consumers each; with none of them, its port accepts connections."""

    path: str | None = None
    timeout: float = DEFAULT_READY_TIMEOUT
    log: str | None = None
    consumers: int | None = None

    @property
    def needs_port(self) -> bool:
        """Whether readiness is seen on the service's port (GET or TCP)."""
        return self.log is None and self.consumers is None

    def to_dict(self) -> dict[str, Any]:
        found = {"log": self.log, "consumers": self.consumers}
        return {"path": self.path, "timeout": self.timeout, **{k: v for k, v in found.items() if v is not None}}


@dataclass(frozen=True)
class ServiceConfig:
    """How the probe runs the service: argv and env templates (placeholders unrendered)."""

    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    ready: ReadyCheck = field(default_factory=ReadyCheck)

    def beside(self, config_file: Path) -> ServiceConfig:
        """A relative `cwd` taken relative to the config file's folder."""
        if self.cwd is None or self.cwd.is_absolute():
            return self
        return replace(self, cwd=(config_file.parent / self.cwd).resolve())

    def to_dict(self) -> dict[str, Any]:
        """The plain form `parse_service` reads back (config.json)."""
        return {"command": list(self.command), "env": dict(self.env),
                "cwd": str(self.cwd) if self.cwd is not None else None,
                "ready": self.ready.to_dict()}

    @property
    def listens(self) -> bool:
        """Whether the service is told the port the probe picked for it (`{port}`)."""
        return any("{port}" in text for text in (*self.command, *self.env.values()))

    def argv(self, port: int, dependencies: Mapping[str, str]) -> list[str]:
        return [render(arg, port, dependencies) for arg in self.command]

    def environment(self, port: int, dependencies: Mapping[str, str]) -> dict[str, str]:
        return {name: render(value, port, dependencies) for name, value in self.env.items()}


def render(text: str, port: int, dependencies: Mapping[str, str]) -> str:
    """`text` with its placeholders filled: `dependencies` maps NAME to the host:port the
    service must use for it (its proxy's listen address)."""

    def fill(match: re.Match[str]) -> str:
        if match.group(1) == "port":
            return str(port)
        if match.group(1) == "provider.url":
            return f"http://{dependencies[PROVIDER]}"
        address = dependencies[match.group(2)]
        host, _, dependency_port = address.rpartition(":")
        part = match.group(3)
        return host if part == "host" else dependency_port if part == "port" else address

    return _PLACEHOLDER.sub(fill, text)


def check_plan_target_name(where: FieldChecker, name: object, path: str, *, what: str = "") -> str:
    """A name a fault plan targets (a dependency, an owned broker): lowercase letters,
    digits, '-' or '_', and none of the names a probe plan gives a meaning of its own."""
    if not isinstance(name, str) or not _PLAN_TARGET_NAME.match(name):
        raise where.error(path, f"{what}must be lowercase letters, digits, '-' or '_' (a fault plan names it), "
                          f"not {name!r}")
    if name in RESERVED_NAMES:
        raise where.error(path, f"{name!r} means something else in a probe plan; choose another name "
                          f"(reserved: {', '.join(RESERVED_NAMES)})")
    return name


def parse_dependencies(where: FieldChecker, raw: Any, address: Callable[[Any, str], str]) -> dict[str, str]:
    """`dependencies:` → {NAME: host:port}; `address(raw, path)` checks one host:port
    (the config's own upstream check)."""
    if raw is None:
        return {}
    spec = where.mapping(raw, "dependencies", optional=tuple(raw) if isinstance(raw, dict) else ())
    result: dict[str, str] = {}
    for name, value in spec.items():
        check_plan_target_name(where, name, f"dependencies.{name}", what="a dependency's name ")
        if isinstance(value, dict):  # one the probe starts (harness.probe.dependency_process)
            if "address" not in value:
                raise where.error(f"dependencies.{name}", "with `command:`, give `address:` too (the host:port "
                                  "its command makes it listen on)" if "command" in value else
                                  "as a mapping, give `address:` (the host:port it listens on)")
            result[name] = address(value["address"], f"dependencies.{name}.address")
        else:
            result[name] = address(value, f"dependencies.{name}")
    return result


def parse_service(where: FieldChecker, raw: Any, dependencies: Mapping[str, str], *,
                  provider: bool = False) -> ServiceConfig:
    """`service:` → ServiceConfig, its placeholders checked against `dependencies` (and
    `{provider.url}` against the config's `provider:`)."""
    if provider:
        dependencies = {**dependencies, PROVIDER: ""}
    spec = where.mapping(raw, "service", required=("command",), optional=SERVICE_KEYS[1:])
    command_raw = spec["command"]
    if not isinstance(command_raw, list) or not command_raw:
        raise where.error("service.command", "must be a non-empty list of arguments, "
                          "e.g. [python, app.py, --port, '{port}']")
    command = []
    for i, arg in enumerate(command_raw):
        if isinstance(arg, bool) or not isinstance(arg, (str, int, float)):
            raise where.error(f"service.command[{i}]", f"must be a string, not {arg!r}")
        command.append(_checked(where, str(arg), f"service.command[{i}]", dependencies))
    env_raw = spec.get("env") or {}
    env_spec = where.mapping(env_raw, "service.env", optional=tuple(env_raw) if isinstance(env_raw, dict) else ())
    env = {}
    for name, value in env_spec.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise where.error(f"service.env.{name}", "must be an environment variable name")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise where.error(f"service.env.{name}", f"must be a string, not {value!r}")
        env[name] = _checked(where, str(value), f"service.env.{name}", dependencies)
    ready = _parse_ready(where, spec.get("ready"))
    if ready.needs_port and not any("{port}" in text for text in (*command, *env.values())):
        raise where.error("service.command", "never tells the service its port: put {port} in command or env "
                          "(the probe picks a free port and proxies it), or, for a worker without one, "
                          "make it ready by `service.ready.log` or `service.ready.consumers`")
    cwd = spec.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd.strip()):
        raise where.error("service.cwd", f"must be a folder's path, not {cwd!r}")
    return ServiceConfig(command=tuple(command), env=env, cwd=Path(cwd) if cwd else None, ready=ready)


def _parse_ready(where: FieldChecker, raw: Any) -> ReadyCheck:
    if raw is None:
        return ReadyCheck()
    path_field = "service.ready" if isinstance(raw, str) else "service.ready.path"
    spec = where.mapping({"path": raw} if isinstance(raw, str) else raw, "service.ready",
                         optional=("path", "timeout", "log", "consumers"))
    given = [key for key in ("path", "log", "consumers") if spec.get(key) is not None]
    if len(given) > 1:
        raise where.error("service.ready", f"takes one of path, log and consumers, not {' and '.join(given)}")
    log = spec.get("log")
    if log is not None:
        if not isinstance(log, str) or not log.strip():
            raise where.error("service.ready.log", f"must be a regular expression a log line matches, not {log!r}")
        try:
            re.compile(log)
        except re.error as error:
            raise where.error("service.ready.log", f"is not a regular expression: {error}") from None
    consumers = spec.get("consumers")
    if consumers is not None and (isinstance(consumers, bool) or not isinstance(consumers, int) or consumers < 1):
        raise where.error("service.ready.consumers", f"must be a whole number of at least 1, not {consumers!r}")
    path = spec.get("path")
    if path is not None and (not isinstance(path, str) or not path.startswith("/")
                             or any(c.isspace() for c in path)):
        raise where.error(path_field, f"must be a URL path starting with /, not {path!r}")
    timeout = where.duration(spec.get("timeout", DEFAULT_READY_TIMEOUT), "service.ready.timeout")
    if timeout <= 0:
        raise where.error("service.ready.timeout", "must be longer than 0s")
    return ReadyCheck(path=path, timeout=timeout, log=log, consumers=consumers)


def _checked(where: FieldChecker, text: str, path: str, dependencies: Mapping[str, str]) -> str:
    for match in _PLACEHOLDER.finditer(text):
        if match.group(1) == "provider.url" and PROVIDER not in dependencies:
            raise where.error(path, "{provider.url} needs a `provider:` section in the config")
        name = match.group(2)
        if name is not None and name not in dependencies:
            known = ", ".join(dependencies) or "none"
            raise where.error(path, f"{match.group(0)} names no dependency (dependencies: {known})")
    return text
