"""Crash at every step (plan `every-step`, harness.nemesis.explorer) on the PostgreSQL
payments example (examples/pg_payments_service.py), on a real PostgreSQL cluster
(tests/support/postgres.py): the probe runs the service, its database behind the
probe's proxy `db` with `protocol: postgres`, learns the steps of its requests and
crashes each before and after.

`split-commit` commits the payment and its answer in two transactions, careful about
every error: only a crash between the two commits leaves a payment without its answer,
and the retry charges again. Every-step finds it; the correct mode passes with every
step crashed both ways."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from probe_helpers import ROOT

from harness.probe.config import ProbeConfig, parse_config
from harness.probe.runner import ProbeResult, ProbeSpec, run_probe
from tests.support.postgres import PostgresDatabase

pytestmark = pytest.mark.slow
SCRIPT = ROOT / "examples/pg_payments_service.py"
CONFIG = ROOT / "examples/pg_payments_service.yaml"
# The bundled plan's exploration, quicker: learn 1.5 s, 0.3 s of retries after each
# restart; the load lasts until the explorer has crashed every step both ways (at most
# the budget: a busy machine restarts the service in 2-3 s instead of 1).
PLAN = {"seed": 7, "explore": {"steps": "every", "actions": ["before", "after"], "learn": "1.5s",
                               "budget": "60s", "each": 1, "wait": "4s", "settle": "0.3s"}}


def explore_config(mode: str, database: PostgresDatabase, *, duration: str = "2s",
                   protocol: str | None = "postgres") -> ProbeConfig:
    raw = yaml.safe_load(CONFIG.read_text())
    raw["endpoints"][0]["effects"]["dsn"] = database.dsn  # the oracle reads the database directly
    raw.pop("plan")
    raw["load"].update({"duration": duration, "users": 4})
    raw["service"] = {"command": [sys.executable, str(SCRIPT), "--mode", mode, "--port", "{port}",
                                  "--dsn", f"postgresql://{database.user}@{{dependency.db}}/{database.name}"],
                      "ready": {"path": "/healthz", "timeout": "20s"}}
    raw["dependencies"] = {"db": {"address": database.address, **({"protocol": protocol} if protocol else {})}}
    return parse_config(raw, source=str(CONFIG))


def explore_run(config: ProbeConfig, out: Path, plan: dict[str, Any] | None = None) -> ProbeResult:
    path = out.with_name(out.name + "-plan.yaml")
    path.write_text(yaml.safe_dump(plan or PLAN))
    return run_probe(ProbeSpec(config=config, out_dir=out, plan=path))


def explain(result: ProbeResult) -> str:
    explore = result.document.get("explore") or {}
    return (result.summary() + "\n" + json.dumps(explore.get("coverage"), default=str)[:3000] + "\n"
            + json.dumps(result.violations[:3], default=str)[:2000])


def test_split_commit_is_caught_by_a_crash_between_its_two_commits(postgres_db: PostgresDatabase,
                                                                   tmp_path: Path) -> None:
    result = explore_run(explore_config("split-commit", postgres_db), tmp_path / "split")
    assert result.verdict == "fail", explain(result)
    assert "one_effect_per_key" in {inv.name for inv in result.check.invariants if not inv.passed}, explain(result)
    coverage = {row["step"]: row for row in result.document["explore"]["coverage"]}
    assert "db INSERT idempotency_keys service" in coverage, explain(result)
    # The violation is put on a crash that leaves the payment without its answer.
    failed_at = {step for step, row in coverage.items() if row["failed"].get("one_effect_per_key")}
    assert failed_at & {"db INSERT idempotency_keys service", "db COMMIT - service", "db BEGIN - service"}, \
        explain(result)
    lines = [orjson.loads(line) for line in (result.run_dir / "faults.jsonl").read_bytes().splitlines()]
    assert any(line["kind"] == "step" and line["outcome"] == "crashed" for line in lines)
    assert [line for line in lines if line["kind"] == "coverage"][0]["coverage"]
    assert "Crash coverage" in (result.run_dir / "report.html").read_text()


def test_the_correct_mode_passes_with_every_step_crashed_before_and_after(postgres_db: PostgresDatabase,
                                                                         tmp_path: Path) -> None:
    result = explore_run(explore_config("correct", postgres_db), tmp_path / "correct")
    assert result.verdict == "pass", explain(result)
    coverage = result.document["explore"]["coverage"]
    request_steps = [row for row in coverage if not row["startup"]]
    assert len(request_steps) >= 4, explain(result)
    assert all(row["crashed"]["before"] >= 1 and row["crashed"]["after"] >= 1 for row in request_steps), \
        explain(result)
    service = json.loads((result.run_dir / "service.json").read_text())
    assert service["starts"] >= 1 + 2 * len(request_steps)  # one restart per crash


def test_every_step_needs_each_dependency_s_protocol(postgres_db: PostgresDatabase, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli.main import main

    raw = explore_config("correct", postgres_db, protocol=None).to_dict()
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["probe", "--config", str(path), "--plan", "every-step", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "explore: dependency 'db' has no protocol" in err[0], err
