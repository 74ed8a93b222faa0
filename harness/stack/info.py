"""What a running stack records about itself: `state.json` as a typed value.

`StackInfo` is the one reading and the one writing of ROOT/state.json. Its attribute
names are the file's keys (docs/internals.md, "Stack state"), so `info.app_url` is
`state["app_url"]`. `StackInfo.from_json(mapping, source)` checks every key and type
and turns a broken or foreign file into one `StackError` naming the file and the
field; `to_json()` gives back exactly the JSON both writers (the supervisor and
`start_compose_stack`) have always written, because older checkouts' locustfiles and
the docs read that file too.

The supervisor's keys (`supervisor_pid`, `control_socket`) are None on a compose
stack, the compose keys (`compose_file`, `project`, `health_timeout`) are None on a
local one, and a None key is left out of the JSON. A service's `status` is None only
in a compose stack's file, which never recorded one (docker is asked instead).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Final, TypeVar

from harness import names
from harness.documents import parse_json
from harness.errors import HarnessError
from harness.stack.private_files import write_private

STATE_FILE: Final = names.STATE_FILE
MODES: Final = ("local", "compose")
PHASES: Final = ("starting", "running", "stopping")

_T = TypeVar("_T")


class StackError(HarnessError):
    """The stack could not be started, reached, changed or stopped."""


class StackAlreadyRunning(StackError):
    """`up` on a root whose stack is already running."""


class _Fields:
    """Typed reads of one JSON object; every failure names the source and the field."""

    def __init__(self, data: object, source: str, where: str = "") -> None:
        if not isinstance(data, Mapping):
            raise StackError(f"{source}: {where or 'the stack state'} is not a JSON object")
        self.data: Mapping[str, object] = data
        self.source = source
        self.where = where

    def _fail(self, key: str, wanted: str) -> StackError:
        name = f"{self.where}.{key}" if self.where else key
        if key not in self.data:
            return StackError(f"{self.source}: field {name!r} is missing; not a state file of this harness?")
        return StackError(f"{self.source}: field {name!r} must be {wanted}, not {self.data[key]!r}")

    def _get(self, key: str, kind: type[_T] | tuple[type, ...], wanted: str, optional: bool) -> object:
        value = self.data.get(key)
        if value is None and optional:
            return None
        # bool is an int to Python; never a pid, a port or a count in this file.
        if not isinstance(value, kind) or isinstance(value, bool):
            raise self._fail(key, wanted)
        return value

    def text(self, key: str) -> str:
        return str(self._get(key, str, "a string", False))

    def text_or_none(self, key: str) -> str | None:
        value = self._get(key, str, "a string or null", True)
        return None if value is None else str(value)

    def choice(self, key: str, allowed: tuple[str, ...]) -> str:
        value = self.text(key)
        if value not in allowed:
            raise self._fail(key, f"one of {', '.join(allowed)}")
        return value

    def integer(self, key: str) -> int:
        value = self._get(key, int, "an integer", False)
        assert isinstance(value, int)
        return value

    def integer_or_none(self, key: str) -> int | None:
        value = self._get(key, int, "an integer or null", True)
        return value if isinstance(value, int) else None

    def number(self, key: str) -> float:
        value = self._get(key, (int, float), "a number", False)
        assert isinstance(value, (int, float))
        return float(value)

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.data.get(key)
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._fail(key, "a list of strings")
        return tuple(value)

    def string_map(self, key: str) -> dict[str, str]:
        value = self.data.get(key)
        if not isinstance(value, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise self._fail(key, "an object of strings")
        return dict(value)

    def objects(self, key: str) -> list[object]:
        value = self.data.get(key)
        if not isinstance(value, list):
            raise self._fail(key, "a list of objects")
        return list(value)


@dataclass(frozen=True)
class ServiceInfo:
    """One entry of `services`: a process (local) or a container (compose) of the stack.

    `pid` is None while the service is down and always in a compose stack; `port` is
    None for a service that listens on none (the consumers); `log` is None in a
    compose stack (`docker compose logs`).
    """

    name: str
    pid: int | None
    port: int | None
    log: str | None
    status: str | None = None

    @classmethod
    def from_json(cls, data: object, source: str, where: str) -> ServiceInfo:
        read = _Fields(data, source, where)
        return cls(name=read.text("name"), pid=read.integer_or_none("pid"), port=read.integer_or_none("port"),
                   log=read.text_or_none("log"), status=read.text_or_none("status"))

    def to_json(self) -> dict[str, object]:
        row: dict[str, object] = {"name": self.name, "pid": self.pid, "port": self.port, "log": self.log}
        if self.status is not None:
            row["status"] = self.status
        return row


@dataclass(frozen=True)
class StackInfo:
    """ROOT/state.json of one stack (docs/internals.md, "Stack state")."""

    mode: str  # local | compose
    phase: str  # starting | running | stopping
    started_at: float
    root: str
    app_url: str  # through the Toxiproxy proxy `app`: where faults apply
    app_direct_url: str
    toxiproxy_url: str
    toxiproxy_kind: str  # embedded | server | external | compose
    redis_url: str  # direct: for the checker and the stream publisher, never faulted
    redis_proxy_url: str  # what the app and the consumers use
    webhook_secret: str
    internal_token: str  # bearer token of the app's /internal/v1/* endpoints
    stream: str
    group: str
    proxy_prefix: str
    proxies: Mapping[str, str]  # plain name (app, redis) -> name on the Toxiproxy
    owner: str  # up | run | foreground
    unsafe_disable: tuple[str, ...]
    app_workers: int
    consumers: int
    # the supervisor's (local stacks only)
    supervisor_pid: int | None = None
    control_socket: str | None = None
    # compose stacks only
    compose_file: str | None = None
    project: str | None = None
    health_timeout: float | None = None
    services: tuple[ServiceInfo, ...] = ()

    @classmethod
    def from_json(cls, data: object, source: str | Path = STATE_FILE) -> StackInfo:
        """Check and type a state file's JSON; a StackError names `source` and the bad field."""
        read = _Fields(data, str(source))
        services = tuple(ServiceInfo.from_json(row, str(source), f"services[{index}]")
                         for index, row in enumerate(read.objects("services")))
        mode = read.choice("mode", MODES)
        info = cls(
            mode=mode, phase=read.choice("phase", PHASES), started_at=read.number("started_at"),
            root=read.text("root"), app_url=read.text("app_url"), app_direct_url=read.text("app_direct_url"),
            toxiproxy_url=read.text("toxiproxy_url"), toxiproxy_kind=read.text("toxiproxy_kind"),
            redis_url=read.text("redis_url"), redis_proxy_url=read.text("redis_proxy_url"),
            webhook_secret=read.text("webhook_secret"), internal_token=read.text("internal_token"),
            stream=read.text("stream"), group=read.text("group"), proxy_prefix=read.text("proxy_prefix"),
            proxies=read.string_map("proxies"), owner=read.text("owner"),
            unsafe_disable=read.strings("unsafe_disable"), app_workers=read.integer("app_workers"),
            consumers=read.integer("consumers"), services=services,
            supervisor_pid=read.integer("supervisor_pid") if mode == "local" else None,
            control_socket=read.text("control_socket") if mode == "local" else None,
            compose_file=read.text("compose_file") if mode == "compose" else None,
            project=read.text("project") if mode == "compose" else None,
            health_timeout=read.number("health_timeout") if mode == "compose" else None,
        )
        return info

    def to_json(self) -> dict[str, object]:
        """The state file's JSON object (None keys left out, see the module docstring)."""
        data: dict[str, object] = {}
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value is None:
                continue
            if spec.name == "services":
                value = [service.to_json() for service in self.services]
            elif spec.name == "unsafe_disable":
                value = list(self.unsafe_disable)
            elif spec.name == "proxies":
                value = dict(self.proxies)
            data[spec.name] = value
        return data

    # --- derived views (nothing here is written to the file) ----------------------

    def service(self, name: str) -> ServiceInfo:
        """The service called name; StackError naming the known ones otherwise."""
        for service in self.services:
            if service.name == name:
                return service
        known = ", ".join(service.name for service in self.services)
        raise StackError(f"unknown service {name!r}; this stack has {known}")

    @property
    def service_names(self) -> tuple[str, ...]:
        return tuple(service.name for service in self.services)


def write_info(root: Path, info: StackInfo) -> None:
    """Write ROOT/state.json atomically (a reader never sees half a file), mode 0600:
    it holds the webhook secret and the internal token."""
    write_private(Path(root) / STATE_FILE, json.dumps(info.to_json(), indent=2) + "\n")


def read_info(root: Path) -> StackInfo | None:
    """ROOT/state.json checked and typed, or None when there is none."""
    path = Path(root) / STATE_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise StackError(f"unreadable stack state {path}: {error}") from error
    data = parse_json(raw, source=str(path), error=StackError)
    return StackInfo.from_json(data, path)


def current_info(root: Path, *, last: StackInfo) -> StackInfo:
    """The state file as it is now, or `last` while it is missing or half-written (a
    handle keeps answering with what it knew while its stack restarts or goes away)."""
    try:
        current = read_info(root)
    except StackError:
        current = None
    return current if current is not None else last


def control_socket_path(root: Path) -> Path:
    """ROOT/control.sock, or a short path in the temp dir when ROOT is too deep for AF_UNIX."""
    path = Path(root) / "control.sock"
    if len(str(path)) <= 100:
        return path
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"harness-{digest}.sock"


def remove_state(root: Path) -> None:
    """Remove ROOT/state.json and the control socket; one already gone is what we want."""
    for path in (Path(root) / STATE_FILE, control_socket_path(Path(root))):
        path.unlink(missing_ok=True)
