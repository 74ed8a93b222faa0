"""A dependency the probe starts itself: `dependencies: {NAME: {address: ..., command: [...]}}`.

A dependency is normally an address the service's own database or cache listens on,
and the probe only puts a proxy in front of it. Given a `command:`, the probe also
runs it, so that a plan can move its clock (Redis expires keys by its own clock,
PostgreSQL's `now()` ages a stored key) and kill or restart it by its name:

    dependencies:
      db:
        address: 127.0.0.1:5433              # where the command makes it listen (loopback, a port)
        command: [/usr/lib/postgresql/15/bin/postgres, -D, /tmp/pg/data, -p, "5433", -k, /tmp/pg]
        env: {PGTZ: UTC}
        cwd: /tmp/pg                          # relative: to the config file
        ready: {timeout: 30s}                 # ready once the address accepts connections
        stop_timeout: 15s                     # SIGTERM, then SIGKILL of its process group
        after_stop: [rm, -f, /tmp/pg/data/postmaster.pid]
        clock: {postgres: "postgresql://postgres@127.0.0.1:5433/postgres"}   # or `clock: redis`

The process runs as a broker the probe owns does (harness.probe.brokers.process: its
own process group, a parent-death signal, every start on the run's lease, its log
`dependency-<NAME>.log` in the run directory). It is started before the proxies and the
service and stopped after them. `clock:` says how its clock is read to verify a clock
fault on it (harness.nemesis.clock_readers): `redis` (the `TIME` command on `address`)
or `{postgres: DSN}` (`clock_timestamp()` over that DSN); a clock fault on a
dependency without `clock:` is refused before the run, since it could not be verified.

`parse_dependency_process` checks one entry with the config's `FieldChecker`, so every
error is the config's one line naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.fieldcheck import FieldChecker
from harness.probe.brokers.process import KEYS as PROCESS_KEYS
from harness.probe.brokers.process import BrokerProcessConfig, parse_broker_process

CLOCK_KINDS = ("redis", "postgres")
KEYS = ("address", *(key for key in PROCESS_KEYS if key != "name"), "clock")


@dataclass(frozen=True)
class DependencyProcess:
    """How the probe runs dependency `process.name`, and how its clock is read
    (`clock`: `redis` or `postgres`, `clock_dsn` the latter's DSN; None: not readable)."""

    process: BrokerProcessConfig
    clock: str | None = None
    clock_dsn: str | None = None

    @property
    def name(self) -> str:
        return self.process.name

    def beside(self, config_file: Path) -> DependencyProcess:
        return replace(self, process=self.process.beside(config_file))

    def to_raw(self) -> dict[str, Any]:
        """The plain form `parse_dependency_process` reads back (config.json)."""
        raw = {"address": self.process.address, **self.process.to_raw()}
        raw.pop("name")
        if self.clock == "redis":
            raw["clock"] = "redis"
        elif self.clock == "postgres":
            raw["clock"] = {"postgres": self.clock_dsn}
        return raw


def parse_dependency_process(where: FieldChecker, raw: Any, name: str, address: str) -> DependencyProcess:
    """`dependencies.NAME` given as a mapping with `command:`; `address` is its checked host:port."""
    path = f"dependencies.{name}"
    spec = where.mapping(raw, path, required=("address", "command"), optional=tuple(
        key for key in KEYS if key not in ("address", "command")))
    if not address.startswith(("127.0.0.1:", "localhost:")):
        raise where.error(f"{path}.address", f"the probe starts only a dependency on 127.0.0.1, not {address!r}")
    process_raw = {key: value for key, value in spec.items() if key not in ("address", "clock")}
    process = parse_broker_process(where, {**process_raw, "name": name}, path, f"tcp://{address}")
    clock, dsn = None, None
    clock_raw = spec.get("clock")
    if clock_raw == "redis":
        clock = "redis"
    elif isinstance(clock_raw, dict) and set(clock_raw) == {"postgres"} and isinstance(clock_raw["postgres"], str) \
            and clock_raw["postgres"].startswith(("postgresql://", "postgres://")):
        clock, dsn = "postgres", clock_raw["postgres"]
    elif clock_raw is not None:
        raise where.error(f"{path}.clock", "how its clock is read: `redis` (TIME on its address) or "
                          "{postgres: postgresql://user@host:port/db}")
    return DependencyProcess(process=process, clock=clock, clock_dsn=dsn)
