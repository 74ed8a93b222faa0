"""A broker the probe owns, restarted by a plan (harness.probe.brokers.process).

End to end on a real RabbitMQ node that the probe itself starts (the `messages:`
entry's `process:`, built by tests/support/rabbitmq.py on free ports in a folder of its
own) and a real PostgreSQL: the bundled plan probe-broker-restart restarts the node
while the correct example consumer holds messages; the run passes, the broker's own
redeliveries are counted, the restart is in faults.jsonl, and nothing the probe
started (node, port mapper, consumer) outlives it. A buggy consumer (auto-ack) under
the same restart loses messages and fails. A plan that restarts a broker the probe
does not own is a one-line config error (exit 2) before anything starts.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from probe_helpers import ROOT
from test_messages_rabbitmq import consumer_config, consumer_processes, explain, failed

from harness.bundled import plan_path
from harness.cli.main import main
from harness.ports import free_ports
from harness.probe.brokers import BrokerError, BrokerStats
from harness.probe.brokers.process import BrokerProcessConfig, BrokerProcessFailed, OwnedBroker, accepts_connections
from harness.probe.config import ProbeConfigError, parse_config
from harness.probe.messages.play import _PublishCount, _Watcher
from harness.probe.runner import ProbeResult, ProbeSpec, run_probe
from tests.support.postgres import PostgresDatabase
from tests.support.rabbitmq import RabbitServer

CONFIG = ROOT / "examples/rabbitmq_consumer.yaml"


@pytest.fixture
def owned_rabbit() -> Iterator[RabbitServer]:
    """A RabbitMQ node prepared (ports, folder) but not started: the probe starts it.
    Stopped here too should a failed test leave it running."""
    server = RabbitServer()
    server.prepare()
    yield server
    server.stop()


def owned_config(mode: str, rabbit: RabbitServer, queue: str, db: PostgresDatabase, **entry: Any) -> dict[str, Any]:
    raw = consumer_config(mode, rabbit, queue, db, **entry)
    raw["messages"][0]["process"] = rabbit.probe_process()
    # A restart takes 5-20 s on a busy machine: the publishes (over half the load) go
    # on after the broker is back, at a pace just above the consumer's, so it holds
    # unacknowledged messages when the restart comes.
    raw["load"]["duration"] = "20s"
    raw["messages"][0].update(count=100, drain_timeout="40s")
    return raw


def probe(raw: dict[str, Any], out: Path, plan: str = "probe-broker-restart") -> ProbeResult:
    config = parse_config(raw, source=str(CONFIG))
    return run_probe(ProbeSpec(config=config, out_dir=out, plan=plan_path(plan)))


def restarts(result: ProbeResult) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (result.run_dir / "faults.jsonl").read_text().splitlines()
            if json.loads(line)["target"] == "broker"]


@pytest.mark.slow
def test_correct_consumer_passes_a_broker_restart_and_nothing_outlives_the_probe(
        owned_rabbit: RabbitServer, postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    queue = "restart-correct"
    result = probe(owned_config("correct", owned_rabbit, queue, postgres_db), tmp_path / "run")
    assert result.verdict == "pass", explain(result)
    counts = result.check.counts["messages"]["payments"]
    assert counts["redeliveries"] > 0 and counts["drained"], counts
    # The restart is on record like every fault: applied, healed, no error.
    [restart] = restarts(result)
    assert (restart["kind"], restart["action"], restart["error"]) == ("process", "restart", None), restart
    record = json.loads((result.run_dir / "brokers.json").read_text())
    assert [(r["name"], r["starts"], r["restarts"]) for r in record] == [("broker", 2, 1)], record
    # The probe stopped what it started: the node, its port mapper, the consumer.
    assert owned_rabbit.node_processes() == []
    assert not accepts_connections(owned_rabbit.address)
    assert consumer_processes(queue) == []


@pytest.mark.slow
def test_auto_ack_consumer_loses_messages_across_a_broker_restart(
        owned_rabbit: RabbitServer, postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    queue = "restart-auto-ack"
    raw = owned_config("auto-ack", owned_rabbit, queue, postgres_db)
    # With auto-ack the broker pushes every message at once (the prefetch does not bound
    # it): a consumer slower than the publishes (150 ms a message, ~7/s, against ~10/s)
    # holds delivered, unapplied messages in its buffer when the restart comes at 1 s,
    # whatever the machine's load. At the example's pace it may have caught up, and then
    # nothing is lost (CI saw this: no violation, 14 confirmed facts all applied).
    command = raw["service"]["command"]
    command[command.index("--work-ms") + 1] = "150"
    raw["messages"][0]["drain_timeout"] = "60s"
    result = probe(raw, tmp_path / "run")
    assert result.verdict == "fail", explain(result)
    assert "published_fact_applied" in failed(result), explain(result)
    assert owned_rabbit.node_processes() == []


def _config_file(tmp_path: Path, *, owned: bool) -> Path:
    raw = yaml.safe_load(CONFIG.read_text())
    raw.pop("plan")
    if owned:
        raw["messages"][0]["process"] = {"name": "broker", "command": ["/bin/false"]}
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_restarting_a_broker_the_probe_does_not_own_is_one_line_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config_file(tmp_path, owned=False)
    out = tmp_path / "run"
    assert main(["probe", "--config", str(path), "--plan", str(plan_path("probe-broker-restart")),
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "windows[0].process.service: the probe cannot restart 'broker'" in err, err
    assert "`process:`" in err, err
    assert not out.exists()


def test_a_plan_may_restart_only_the_broker_it_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _config_file(tmp_path, owned=True)
    plan = tmp_path / "plan.yaml"
    plan.write_text("seed: 1\nwindows:\n  - {at: 1s, for: 1s, process: {action: restart, service: rabbit}}\n")
    out = tmp_path / "run"
    assert main(["probe", "--config", str(path), "--plan", str(plan), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "the brokers it owns: 'broker'" in err, err
    assert not out.exists()


@pytest.mark.parametrize(("process", "field", "words"), [
    ({"command": []}, "messages[0].process.command", "non-empty"),
    ({"name": "service", "command": ["x"]}, "messages[0].process.name", "means something else"),
    ({"name": "Broker", "command": ["x"]}, "messages[0].process.name", "lowercase"),
    ({"command": ["x"], "stop_timeout": "0s"}, "messages[0].process.stop_timeout", "longer than 0s"),
    ({"command": ["x"], "colour": "red"}, "messages[0].process", "colour"),
])
def test_a_bad_broker_process_is_a_config_error_naming_the_field(process: dict[str, Any], field: str,
                                                                 words: str) -> None:
    raw = yaml.safe_load(CONFIG.read_text())
    raw["messages"][0]["process"] = process
    with pytest.raises(ProbeConfigError) as caught:
        parse_config(raw, source="probe.yaml")
    message = str(caught.value)
    assert message.startswith(f"probe.yaml: {field}"), message
    assert words in message and "\n" not in message, message


def test_the_probe_owns_only_a_loopback_broker() -> None:
    raw = yaml.safe_load(CONFIG.read_text())
    raw["messages"][0].update(url="amqp://guest:guest@rabbit.example:5672/%2F", process={"command": ["x"]})
    with pytest.raises(ProbeConfigError, match=r"messages\[0\]\.process: the probe owns only a broker on 127.0.0.1"):
        parse_config(raw, source="probe.yaml")


def test_two_owned_brokers_need_two_names() -> None:
    raw = yaml.safe_load(CONFIG.read_text())
    second = {**raw["messages"][0], "name": "refunds", "url": "amqp://guest:guest@127.0.0.1:5673/%2F"}
    raw["messages"][0]["process"] = {"command": ["x"]}
    second["process"] = {"command": ["y"]}
    raw["messages"].append(second)
    with pytest.raises(ProbeConfigError, match="every `process:` needs a name of its own"):
        parse_config(raw, source="probe.yaml")


# --- the owned broker's process, without a real broker ------------------------------------

def _listener(tmp_path: Path, port: int, **extra: Any) -> BrokerProcessConfig:
    """A stand-in broker: a Python process listening on 127.0.0.1:port (no RabbitMQ needed
    to prove the process handling; the RabbitMQ tests above prove it on the real one)."""
    script = tmp_path / "listen.py"
    script.write_text("import os, socket, sys, time\n"
                      "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                      "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
                      "open(sys.argv[2], 'a').write(f'{os.getpid()}\\n')\n"
                      "while True: time.sleep(1)\n")
    return BrokerProcessConfig(name="broker", command=(sys.executable, str(script), str(port),
                                                       str(tmp_path / "starts")),
                               address=f"127.0.0.1:{port}", ready_timeout=10.0, stop_timeout=5.0, **extra)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def test_owned_broker_restart_is_a_new_process_accepting_connections_and_stop_leaves_nothing(
        tmp_path: Path) -> None:
    [port] = free_ports(1)
    config = _listener(tmp_path, port, after_stop=("touch", str(tmp_path / "after-stop")))
    broker = OwnedBroker(config, log_path=tmp_path / "broker.log", base_env=os.environ)
    try:
        broker.start()
        first = broker.pid
        assert first is not None and accepts_connections(config.address)
        broker.restart("broker")
        second = broker.pid
        assert second is not None and second != first and not _alive(first)
        assert accepts_connections(config.address)
        assert (broker.starts, broker.restarts) == (2, 1)
        assert not (tmp_path / "after-stop").exists()  # only after the last stop
    finally:
        broker.stop()
    assert not _alive(second) and not accepts_connections(config.address)
    assert (tmp_path / "after-stop").exists()
    assert len((tmp_path / "starts").read_text().split()) == 2


def test_a_restart_that_does_not_come_back_fails_with_the_log(tmp_path: Path) -> None:
    [port] = free_ports(1)
    config = _listener(tmp_path, port)
    broker = OwnedBroker(config, log_path=tmp_path / "broker.log", base_env=os.environ)
    try:
        broker.start()
        # The second incarnation cannot listen: its start must fail, not pass silently.
        broker.config = replace(config, command=(sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"))
        broker._service.spec = replace(broker._service.spec, argv=list(broker.config.command))
        with pytest.raises(BrokerProcessFailed, match=r"exited before it accepted connections(.|\n)*boom"):
            broker.restart("broker")
    finally:
        broker.stop()


def test_an_owned_broker_refuses_an_address_someone_else_listens_on(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = OwnedBroker(_listener(tmp_path, port), log_path=tmp_path / "broker.log", base_env=os.environ)
        with pytest.raises(BrokerProcessFailed, match="already taken"):
            broker.start()
        broker.stop()
    assert not (tmp_path / "starts").exists()


class _CountingBroker:
    """Stats as a broker reports them: its counters start again after a restart."""

    def __init__(self, readings: list[tuple[int, int]]) -> None:
        self.readings = iter(readings)

    def stats(self) -> BrokerStats:
        redeliveries, stored = next(self.readings)
        return BrokerStats(redeliveries=redeliveries, unacknowledged=0, stored=stored)


def test_the_watcher_carries_counts_across_a_broker_restart() -> None:
    # 5 redeliveries and 20 publishes before the restart, counted from 0 again after it.
    watcher = _Watcher(_CountingBroker([(3, 10), (5, 20), (1, 2), (2, 6)]))  # type: ignore[arg-type]
    readings = [watcher.read() for _ in range(4)]
    assert [(s.redeliveries, s.stored) for s in readings] == [(3, 10), (5, 20), (6, 22), (7, 26)]
    assert watcher.highest == 7


def test_the_watcher_counts_the_run_from_the_counters_it_found() -> None:
    # The queue counted 30 redeliveries and 100 publishes before this run: none are the run's.
    watcher = _Watcher(_CountingBroker([(30, 100), (30, 100), (32, 110), (1, 3), (2, 5)]))  # type: ignore[arg-type]
    watcher.begin()
    assert watcher.before == {"redeliveries": 30, "stored": 100, "dead_letters": None}
    assert watcher.highest is None
    readings = [watcher.read() for _ in range(4)]
    # then a restart: the broker counts from 0 again; the run's counts carry on
    assert [(s.redeliveries, s.stored) for s in readings] == [(0, 0), (2, 10), (3, 13), (4, 15)]
    assert watcher.highest == 4


def test_a_publish_count_that_stood_still_has_caught_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A restart loses what the broker counted last: 20 confirmed publishes, 16 counted
    in all. A counter that stood still for longer than the statistics interval has
    caught up (else the drain waited out its whole timeout for a count that never came)."""
    monkeypatch.setattr("harness.probe.messages.play.STATS_SETTLE", 0.3)
    watcher = _Watcher(_CountingBroker([(0, 12), (0, 1), (0, 4), (0, 4), (0, 4)]))  # type: ignore[arg-type]
    counted = _PublishCount(20)
    for _ in range(4):
        counted.see(watcher.read())
        assert not counted.current  # moving, or not long enough still
    time.sleep(0.4)
    counted.see(watcher.read())
    assert counted.current
    reached = _PublishCount(16)
    reached.see(BrokerStats(redeliveries=0, unacknowledged=0, stored=16))
    assert reached.current


def test_a_watcher_that_cannot_read_the_counters_before_the_run_says_so() -> None:
    class Unreachable:
        def stats(self) -> BrokerStats:
            raise BrokerError("management: connection refused")

    watcher = _Watcher(Unreachable())  # type: ignore[arg-type]
    watcher.begin()
    assert watcher.before is None and watcher.before_error and "connection refused" in watcher.before_error


def test_a_config_with_an_owned_broker_reads_back_the_same(tmp_path: Path) -> None:
    raw = yaml.safe_load(CONFIG.read_text())
    raw["messages"][0]["process"] = {"name": "rabbit", "command": ["rabbitmq-server"], "env": {"A": "1"},
                                     "cwd": "/tmp/x", "ready": {"timeout": "30s"}, "stop_timeout": "4s",
                                     "after_stop": ["epmd", "-kill"]}
    config = parse_config(raw, source="probe.yaml")
    process = config.messages[0].spec.process
    assert process is not None
    assert (process.name, process.address, process.ready_timeout, process.stop_timeout, process.after_stop) == \
        ("rabbit", "127.0.0.1:5672", 30.0, 4.0, ("epmd", "-kill"))
    assert parse_config(config.to_dict(), source="probe.yaml") == config
