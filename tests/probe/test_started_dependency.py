"""A dependency the probe starts itself (`dependencies: {NAME: {address, command, clock}}`,
harness.probe.dependency_process): parsed and read back, refused in one line when it
cannot be started or its clock not read, and, end to end, a PostgreSQL the probe starts
under a fake clock for examples/pg_payments_service.py, its clock jumped 2 h by the plan
and verified on `clock_timestamp()`, stopped after the run.

Needs Debian's PostgreSQL 15 and libfaketime (./scripts/setup.sh); without them the
tests fail saying so, never skip."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.nemesis.fake_clock import ClockUnavailable, libfaketime_path
from harness.nemesis.plans import PlanError
from harness.ports import free_port
from harness.probe.config import ProbeConfigError, parse_config
from harness.probe.plan_targets import ProbeTargets, parse_probe_plan
from harness.probe.runner import ProbeSpec, run_probe
from tests.probe.probe_helpers import ROOT
from tests.support.postgres import BIN_DIR, INSTALL_HINT, binaries_installed

SERVICE = {"command": [sys.executable, str(ROOT / "examples/payments_service.py"), "--port", "{port}"]}
ENDPOINT = {"name": "pay", "path": "/payments", "body": {"amount_cents": "{int:1-9}", "currency": "EUR",
                                                         "reference": "{uuid}"}, "id": {"pointer": "/id"}}


def config(db: Any) -> dict[str, Any]:
    return {"service": SERVICE, "endpoints": [ENDPOINT], "dependencies": {"db": db}}


def test_a_started_dependency_reads_back_the_same_and_is_a_process_and_clock_target() -> None:
    db = {"address": "127.0.0.1:6390", "command": ["redis-server", "--port", "6390"], "env": {"A": "1"},
          "ready": {"timeout": "5s"}, "clock": "redis"}
    parsed = parse_config(config(db), source="probe.yaml")
    assert parsed.dependencies == {"db": "127.0.0.1:6390"}
    process = parsed.dependency_processes["db"]
    assert (process.name, process.process.command, process.process.address, process.clock) == \
        ("db", ("redis-server", "--port", "6390"), "127.0.0.1:6390", "redis")
    assert parse_config(parsed.to_dict(), source="probe.yaml") == parsed
    # An address-only dependency stays a plain address.
    assert parse_config(config("127.0.0.1:5432"), source="p").to_dict()["dependencies"] == {"db": "127.0.0.1:5432"}


@pytest.mark.parametrize(("db", "words"), [
    ({"command": ["redis-server"]}, "dependencies.db: with `command:`, give `address:` too"),
    ({"address": "10.0.0.5:6379", "command": ["redis-server"]}, "dependencies.db.address: the probe starts only"),
    ({"address": "127.0.0.1:6390", "command": []}, "dependencies.db.command: must be a non-empty list"),
    ({"address": "127.0.0.1:6390", "command": ["redis-server"], "clock": "ntp"}, "dependencies.db.clock: "),
    ({"address": "127.0.0.1:6390", "command": ["redis-server"], "clock": {"postgres": 5}}, "dependencies.db.clock: "),
    ({"address": "127.0.0.1:6390", "command": ["redis-server"], "colour": "red"}, "dependencies.db"),
])
def test_a_dependency_that_cannot_be_started_is_one_line_naming_the_field(db: dict[str, Any], words: str) -> None:
    with pytest.raises(ProbeConfigError) as caught:
        parse_config(config(db), source="probe.yaml")
    message = str(caught.value)
    assert message.startswith("probe.yaml: ") and words in message and "\n" not in message, message


def test_a_clock_fault_on_a_started_dependency_without_a_clock_reader_is_refused() -> None:
    raw = {"seed": 1, "windows": [{"at": "1s", "for": "1s", "clock": {"target": "db", "jump": "1h"}}]}
    targets = ProbeTargets.plain(("db",), service=True, brokers=("db",))
    with pytest.raises(PlanError) as caught:
        parse_probe_plan(raw, source="p.yaml", targets=targets)
    assert "its clock cannot be read" in str(caught.value) and "give it `clock:`" in str(caught.value)
    # With a reader it is a clock target like the service.
    parse_probe_plan(raw, source="p.yaml", targets=ProbeTargets.plain(("db",), service=True, brokers=("db",),
                                                                       started=("db",)))


# --- end to end: a PostgreSQL the probe starts, its clock jumped ------------------------

@pytest.fixture
def pg_cluster() -> Iterator[Path]:
    """An initdb'd data folder (owned by `postgres` when we are root), removed after.
    UTF8, not initdb's default SQL_ASCII for the C locale, whose text psycopg returns as bytes."""
    if not binaries_installed():
        pytest.fail(INSTALL_HINT, pytrace=False)
    try:
        libfaketime_path()
    except ClockUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="harness-pgdep-", dir="/tmp"))
    user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None
    if user is not None:
        os.chown(root, user.pw_uid, user.pw_gid)
    as_user = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user is not None else {}
    subprocess.run([str(BIN_DIR / "initdb"), "-D", str(root / "data"), "-A", "trust", "-U", "postgres", "--no-sync",
                    "--no-instructions", "--locale=C", "--encoding=UTF8"], check=True, capture_output=True, timeout=120,
                   env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root)}, **as_user)  # type: ignore[arg-type]
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_the_probe_starts_a_database_and_jumps_its_clock_verified_on_clock_timestamp(
        pg_cluster: Path, tmp_path: Path) -> None:
    port = free_port()
    dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    server = [str(BIN_DIR / "postgres"), "-D", str(pg_cluster / "data"), "-k", str(pg_cluster), "-p", str(port),
              "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]
    command = ["runuser", "-u", "postgres", "--", *server] if os.geteuid() == 0 else server
    (tmp_path / "clock.yaml").write_text(
        "seed: 1\nwindows:\n  - {at: 0.5s, for: 1s, clock: {target: db, jump: 2h}}\n")
    raw = {
        "service": {"command": [sys.executable, str(ROOT / "examples/pg_payments_service.py"), "--mode", "correct",
                                "--port", "{port}", "--dsn", "postgresql://postgres@{dependency.db}/postgres"],
                    "ready": {"path": "/healthz", "timeout": "30s"}},
        "dependencies": {"db": {"address": f"127.0.0.1:{port}", "command": command, "ready": {"timeout": "60s"},
                                "stop_timeout": "10s", "clock": {"postgres": dsn}}},
        "identities": [{"Authorization": "Bearer alice"}, {"Authorization": "Bearer bob"}],
        "endpoints": [{"name": "pay", "path": "/payments", "body": {"amount_cents": "{int:100-999}", "currency": "EUR",
                                                                    "reference": "order-{uuid}"},
                       "mutate": "amount_cents", "id": {"pointer": "/id"}, "expect": {"created": [201]}}],
        "load": {"users": 2, "duration": "2s"},
    }
    config_ = parse_config(raw, source=str(tmp_path / "probe.yaml"))
    result = run_probe(ProbeSpec(config=config_, out_dir=tmp_path / "run", plan=tmp_path / "clock.yaml"))
    assert result.verdict == "pass", result.summary()
    faults = [json.loads(line) for line in (result.run_dir / "faults.jsonl").read_text().splitlines()]
    [jump] = [fault for fault in faults if fault.get("clock") == "jump"]
    assert jump["error"] is None and abs(jump["observed_offset"] - 7200) < 2.0, jump
    assert (result.run_dir / "clocks" / "db.offset").exists()
    assert (result.run_dir / "dependency-db.log").exists()
    with pytest.raises(OSError):  # stopped with the run
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_started_dependency_is_a_process_target_by_its_name() -> None:
    raw = {"seed": 1, "windows": [{"at": "1s", "for": "1s", "process": {"action": "kill", "service": "db"}}]}
    parse_probe_plan(raw, source="p.yaml", targets=ProbeTargets.plain(("db",), service=True, brokers=("db",)))
    with pytest.raises(PlanError):  # an address-only dependency is no process of the probe's
        parse_probe_plan(raw, source="p.yaml", targets=ProbeTargets.plain(("db",), service=True))
