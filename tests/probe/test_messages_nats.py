"""The NATS JetStream consumer example (examples/nats_consumer.py) under `harness probe`
with `messages:`, on a real nats-server with JetStream and a real PostgreSQL, under
probe-redelivery: the correct mode passes with redeliveries JetStream itself counted
(after AckWait), ack-before-commit loses the batch a kill lands in
(published_fact_applied). JetStream drops the second publish of one Nats-Msg-Id: the
probe records it as the broker's duplicate."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from probe_helpers import ROOT

from harness.bundled import plan_path
from harness.probe.config import parse_config
from harness.probe.runner import ProbeResult, ProbeSpec, run_probe
from tests.support.nats import NatsServer
from tests.support.postgres import PostgresDatabase

pytestmark = pytest.mark.slow
CONFIG = ROOT / "examples/nats_consumer.yaml"


def consumer_config(mode: str, server: NatsServer, subject: str, db: PostgresDatabase) -> dict[str, Any]:
    raw = yaml.safe_load(CONFIG.read_text())
    command = raw["service"]["command"]
    command[0] = sys.executable
    command[command.index("--mode") + 1] = mode
    command[command.index("--subject") + 1] = subject
    command[command.index("--dsn") + 1] = db.dsn
    raw["service"]["cwd"] = str(ROOT / "examples")
    raw["dependencies"]["broker"] = server.address
    message = raw["messages"][0]
    message.update(url=server.url, queue=subject)
    message["effects"]["dsn"] = db.dsn
    raw.pop("plan")
    return raw


def probe(raw: dict[str, Any], out: Path) -> ProbeResult:
    return run_probe(ProbeSpec(config=parse_config(raw, source=str(CONFIG)), out_dir=out,
                               plan=plan_path("probe-redelivery")))


def explain(result: ProbeResult) -> str:
    return (result.summary() + "\n" + json.dumps(result.check.counts.get("messages"), default=str) + "\n"
            + json.dumps(result.violations[:2], default=str)[:2000]
            + "\n" + (result.run_dir / "service.log").read_text(errors="replace")[-1500:])


def test_correct_nats_consumer_passes(nats_server: NatsServer, nats_subject: str, postgres_db: PostgresDatabase,
                                      tmp_path: Path) -> None:
    result = probe(consumer_config("correct", nats_server, nats_subject, postgres_db), tmp_path / "run")
    assert result.verdict == "pass", explain(result)
    counts = result.check.counts["messages"]["payments"]
    assert counts["redeliveries"] > 0 and counts["drained"]
    publishes = [json.loads(line) for path in (result.run_dir / "history").glob("messages-*.jsonl")
                 for line in path.read_text().splitlines()]
    # The second publish of one id inside JetStream's window is the broker's duplicate.
    assert any(record.get("duplicate") for record in publishes if record["type"] == "ok")


def test_ack_before_commit_nats_consumer_loses_messages(nats_server: NatsServer, nats_subject: str,
                                                        postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    result = probe(consumer_config("ack-before-commit", nats_server, nats_subject, postgres_db), tmp_path / "run")
    assert result.verdict == "fail", explain(result)
    assert {inv.name for inv in result.check.invariants if not inv.passed} == {"published_fact_applied"}, \
        explain(result)
