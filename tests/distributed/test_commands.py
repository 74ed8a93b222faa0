"""The commands behind `harness run --workers/--remote-workers` and `harness worker`,
checked without starting Locust: addresses, validation, and the Locust command lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.load.locust_process import LocustProcess, parse_master_address
from harness.run.runner import RunSpec
from tests.support.cli import clean_env, run_harness


def process(**overrides: object) -> LocustProcess:
    values: dict[str, object] = dict(locustfile=Path("harness/locustfiles/mixed.py"), host="http://h:1", users=4,
                                     spawn_rate=4.0, duration=5.0, processes=1, output_dir=Path("out"),
                                     env={})
    values.update(overrides)
    return LocustProcess(**values)  # type: ignore[arg-type]


def test_master_addresses() -> None:
    assert parse_master_address("10.0.0.5") == ("10.0.0.5", 5557)
    assert parse_master_address("10.0.0.5:6000") == ("10.0.0.5", 6000)
    assert parse_master_address(":6000") == ("127.0.0.1", 6000)
    assert parse_master_address("[::1]:6000") == ("::1", 6000)
    for bad in ("host:port", "host:0", "host:70000"):
        with pytest.raises(HarnessError, match="bad master address"):
            parse_master_address(bad)


def test_one_process_is_standalone_more_are_a_master_with_local_workers() -> None:
    alone = process()
    assert alone.master_bind is None and "--master" not in alone.command()
    spread = process(processes=3)
    command = spread.command()
    host, port = spread.master_bind  # type: ignore[misc]
    assert host == "127.0.0.1"
    assert command[command.index("--expect-workers") + 1] == "3"
    assert command[command.index("--master-bind-port") + 1] == str(port)
    worker = spread.worker_command()
    assert worker[worker.index("--master-port") + 1] == str(port) and "--worker" in worker
    assert "--host" not in worker  # the host and settings come from the master


def test_remote_workers_listen_on_every_interface_unless_told() -> None:
    remote = process(processes=0, remote_workers=2)
    assert remote.master_bind == ("0.0.0.0", 5557)
    command = remote.command()
    assert command[command.index("--expect-workers") + 1] == "2"
    bound = process(processes=1, remote_workers=1, master_bind=("10.1.2.3", 7000))
    assert bound.command()[bound.command().index("--expect-workers") + 1] == "2"
    assert bound.worker_command()[bound.worker_command().index("--master-host") + 1] == "10.1.2.3"


def test_run_spec_validation() -> None:
    RunSpec("mixed", processes=0, remote_workers=1).validate()
    for spec, message in ((RunSpec("mixed", processes=0), "--workers"),
                          (RunSpec("mixed", remote_workers=-1), "--remote-workers"),
                          (RunSpec("mixed", master_bind="here:port"), "bad master address")):
        with pytest.raises(HarnessError, match=message):
            spec.validate()


def test_cli_bad_worker_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args in (["worker", "mixed"], ["worker", "nope", "--master", "h"],
                 ["worker", "mixed", "--master", "h:x"], ["run", "mixed", "--workers", "-1"]):
        result = run_harness(*args, cwd=tmp_path, env=clean_env(), timeout=60)
        assert result.returncode == 2, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
