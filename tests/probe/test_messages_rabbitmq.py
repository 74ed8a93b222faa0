"""The RabbitMQ consumer example (examples/rabbitmq_consumer.py) under `harness probe`
with `messages:`, on a real RabbitMQ node and a real PostgreSQL, under the bundled plan
probe-redelivery: the probe starts the consumer as `service`, its broker link through
the dependency proxy `broker`, publishes payments with duplicates on purpose, provokes
redeliveries and counts each payment's rows in the consumer's own database.

The correct mode passes (with redeliveries the broker itself counted); each buggy mode
fails by its own invariant: auto-ack, ack-before-commit and inbox-outside-transaction
lose messages (published_fact_applied), no-domain-guard pays one payment twice under
a new message id (fact_applied_once), reject-redelivered parks valid messages in the
dead-letter queue (no_valid_message_dead_lettered). A consumer that takes nothing is inconclusive,
and nothing the probe started outlives it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from probe_helpers import ROOT

from harness.bundled import plan_path
from harness.errors import HarnessError
from harness.probe.config import parse_config
from harness.probe.runner import ProbeResult, ProbeSpec, run_probe
from tests.support.postgres import PostgresDatabase
from tests.support.rabbitmq import RabbitServer

pytestmark = pytest.mark.slow
CONFIG = ROOT / "examples/rabbitmq_consumer.yaml"


def consumer_config(mode: str, rabbit: RabbitServer, queue: str, db: PostgresDatabase, *,
                    consumer_queue: str | None = None, **entry: Any) -> dict[str, Any]:
    """The example's config aimed at the test's broker, queue and database."""
    raw = yaml.safe_load(CONFIG.read_text())
    command = raw["service"]["command"]
    command[0] = sys.executable
    command[command.index("--mode") + 1] = mode
    command[command.index("--queue") + 1] = consumer_queue or queue
    command[command.index("--dsn") + 1] = db.dsn
    raw["service"]["cwd"] = str(ROOT / "examples")
    raw["dependencies"]["broker"] = rabbit.address
    message = raw["messages"][0]
    message.update(url=rabbit.url, management=rabbit.management_url, queue=queue, **entry)
    message["effects"]["dsn"] = db.dsn
    raw.pop("plan")
    return raw


def probe(raw: dict[str, Any], out: Path) -> ProbeResult:
    config = parse_config(raw, source=str(CONFIG))
    return run_probe(ProbeSpec(config=config, out_dir=out, plan=plan_path("probe-redelivery")))


def failed(result: ProbeResult) -> set[str]:
    return {inv.name for inv in result.check.invariants if not inv.passed}


def explain(result: ProbeResult) -> str:
    return (result.summary() + "\n" + json.dumps(result.check.counts.get("messages"), default=str) + "\n"
            + json.dumps(result.violations[:2], default=str)[:2000]
            + "\n" + (result.run_dir / "service.log").read_text(errors="replace")[-1500:])


def consumer_processes(queue: str) -> list[int]:
    """Pids of live processes whose command line names the test's queue."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"rabbitmq_consumer.py" in b" ".join(cmdline) and queue.encode() in cmdline:
            found.append(int(entry.name))
    return found


def test_correct_consumer_passes_under_probe_redelivery(rabbitmq_server: RabbitServer, rabbitmq_queue: str,
                                                        postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    result = probe(consumer_config("correct", rabbitmq_server, rabbitmq_queue, postgres_db), tmp_path / "run")
    assert result.verdict == "pass", explain(result)
    counts = result.check.counts["messages"]["payments"]
    assert counts["redeliveries"] > 0 and counts["drained"] and counts["stats_current"]
    kinds = {kind.split(":")[0] for kind in counts["publishes"]}
    assert kinds == {"first", "duplicate", "concurrent_duplicate", "same_fact_new_id", "burst"}
    names = {inv.name: inv for inv in result.check.invariants}
    assert names["fact_applied_once"].checked == counts["facts"] > 30
    assert names["published_fact_applied"].checked == counts["confirmed_facts"]
    # The faults happened: the consumer was killed and started again, its link was cut.
    assert len(result.document["faults"]) >= 6, result.document["faults"]
    publishes = [json.loads(line) for path in (result.run_dir / "history").glob("messages-*.jsonl")
                 for line in path.read_text().splitlines()]
    assert {record.get("kind") for record in publishes if record["type"] == "invoke"} >= {"same_fact_new_id"}
    assert consumer_processes(rabbitmq_queue) == []


def _without_port(raw: dict[str, Any], ready: dict[str, Any]) -> dict[str, Any]:
    command = raw["service"]["command"]
    at = command.index("--port")
    del command[at:at + 2]
    raw["service"]["ready"] = ready
    return raw


@pytest.mark.parametrize("ready", [{"log": "consuming restart-"}, {"consumers": 1}], ids=["log", "consumers"])
def test_a_worker_without_a_port_is_ready_by_its_log_or_its_queue_s_consumers(
        ready: dict[str, Any], rabbitmq_server: RabbitServer, postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    """No HTTP port: each start (the first and every one after a kill) waits for the
    worker's own sign, and the run is judged as with a health port."""
    queue = f"restart-{next(iter(ready))}-{tmp_path.name[-12:]}"
    raw = _without_port(consumer_config("correct", rabbitmq_server, queue, postgres_db), ready)
    result = probe(raw, tmp_path / "run")
    assert result.verdict == "pass", explain(result)
    record = json.loads((result.run_dir / "service.json").read_text())
    assert record["starts"] >= 2, record  # killed and started again, ready each time
    assert (result.run_dir / "service.log").read_text().count(f"consumer: consuming {queue}") == record["starts"]


def test_a_worker_that_never_shows_its_ready_line_fails_the_start(
        rabbitmq_server: RabbitServer, rabbitmq_queue: str, postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    raw = _without_port(consumer_config("correct", rabbitmq_server, rabbitmq_queue, postgres_db),
                        {"log": "a line it never prints", "timeout": "2s"})
    with pytest.raises(HarnessError) as caught:
        probe(raw, tmp_path / "run")
    assert "not ready after 2s" in str(caught.value), caught.value


@pytest.mark.parametrize(("mode", "invariant"), [
    ("auto-ack", "published_fact_applied"),
    ("ack-before-commit", "published_fact_applied"),
    ("inbox-outside-transaction", "published_fact_applied"),
    ("no-domain-guard", "fact_applied_once"),
])
def test_each_buggy_consumer_fails_by_its_own_invariant(mode: str, invariant: str, rabbitmq_server: RabbitServer,
                                                         rabbitmq_queue: str, postgres_db: PostgresDatabase,
                                                         tmp_path: Path) -> None:
    result = probe(consumer_config(mode, rabbitmq_server, rabbitmq_queue, postgres_db), tmp_path / mode)
    assert result.verdict == "fail", explain(result)
    assert invariant in failed(result), explain(result)
    if mode == "no-domain-guard":
        copies = {publish["kind"] for violation in result.violations if violation["invariant"] == invariant
                  for publish in violation["evidence"]["publishes"]}
        assert "same_fact_new_id" in copies, explain(result)
    assert consumer_processes(rabbitmq_queue) == []


def test_dead_lettered_valid_messages_fail_their_invariant(rabbitmq_server: RabbitServer, rabbitmq_queue: str,
                                                           postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    dead = f"{rabbitmq_queue}.dead"
    raw = consumer_config("reject-redelivered", rabbitmq_server, rabbitmq_queue, postgres_db, dead_letter=dead)
    raw["service"]["command"] += ["--dead-letter", dead]
    result = probe(raw, tmp_path / "dead")
    assert result.verdict == "fail", explain(result)
    assert "no_valid_message_dead_lettered" in failed(result), explain(result)
    outcome = json.loads((result.run_dir / "messages.jsonl").read_text().splitlines()[0])
    assert outcome["dead_letters"] and outcome["dead_letter_count"] == len(outcome["dead_letters"])
    parked = [v for v in result.violations if v["invariant"] == "no_valid_message_dead_lettered"]
    assert parked and all(v["evidence"]["message_id"] for v in parked)


def test_consumer_that_takes_nothing_is_inconclusive(rabbitmq_server: RabbitServer, rabbitmq_queue: str,
                                                      postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    # The consumer is up (ready) but reads another queue: to the probe it is down throughout.
    raw = consumer_config("correct", rabbitmq_server, rabbitmq_queue, postgres_db,
                          consumer_queue=f"{rabbitmq_queue}-elsewhere", drain_timeout="3s", count=10)
    result = probe(raw, tmp_path / "idle")
    assert result.verdict == "inconclusive", explain(result)
    assert not failed(result)
    assert any("no fact took effect" in reason for reason in result.check.inconclusive_reasons)
    assert result.exit_code == 3
    assert os.path.exists(result.run_dir / "messages.jsonl")


def test_a_rerun_with_the_seed_counts_only_its_own_facts_and_redeliveries(
        rabbitmq_server: RabbitServer, rabbitmq_queue: str, postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    # The false PASS of a rerun: one seed, one queue, one database; the second consumer
    # acknowledges every message and pays nothing. Counted over the queue's life and
    # against the first run's rows it looked like a PASS with 'N redelivered'.
    first = probe(consumer_config("correct", rabbitmq_server, rabbitmq_queue, postgres_db, count=20),
                  tmp_path / "first")
    assert first.verdict == "pass", explain(first)
    second = probe(consumer_config("discard", rabbitmq_server, rabbitmq_queue, postgres_db, count=20),
                   tmp_path / "second")
    assert second.verdict != "pass", explain(second)
    counts = second.check.counts["messages"]["payments"]
    assert counts["counts_before"]["redeliveries"] >= first.check.counts["messages"]["payments"]["redeliveries"] > 0
    assert counts["preexisting_facts"] == 0  # the nonce: this run's facts are its own
    assert any("no fact took effect" in reason for reason in second.check.inconclusive_reasons), explain(second)
    assert first.document["load"]["nonce"] != second.document["load"]["nonce"]
