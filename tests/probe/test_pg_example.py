"""The PostgreSQL payments example (examples/pg_payments_service.py) under `harness probe`,
on a real PostgreSQL cluster (tests/support/postgres.py), two identities, and the
service's own database as the oracle of effects.

The correct mode passes; each buggy mode fails by its own invariant:
unscoped-keys → identities_isolated, store-after-commit and check-then-insert →
one_effect_per_key, effect-before-check → refused_no_effect, store-5xx and
store-5xx-unmarked → replay_fidelity (a 503 replayed, marked or not),
claim-not-released → in_flight_refused_or_waited (a key stuck after a failure). The 5xx are real: the probe runs the
service itself (`service:`), its database behind the probe's own dependency proxy
(`dependencies:`), and harness/plans/probe-dependencies.yaml makes the database slow,
gone and resetting, and the process paused and killed."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from probe_helpers import ROOT

from harness.history import iter_operations
from harness.probe.config import ProbeConfig, parse_config
from harness.probe.runner import ProbeResult, ProbeSpec, run_probe
from tests.support.postgres import PostgresDatabase
from tests.support.services import HttpService

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.slow
SCRIPT = ROOT / "examples/pg_payments_service.py"
CONFIG = ROOT / "examples/pg_payments_service.yaml"
SECONDS = 4


def pg_config(dsn: str, **load: Any) -> ProbeConfig:
    """The example's config with the test's database as the oracle's DSN."""
    raw = yaml.safe_load(CONFIG.read_text())
    raw["endpoints"][0]["effects"]["dsn"] = dsn
    raw.pop("plan")
    raw["load"].update({"duration": f"{SECONDS}s", **load})
    return parse_config(raw, source=str(CONFIG))


@pytest.fixture
def pg_service(http_services: Callable[..., HttpService]) -> Callable[..., HttpService]:
    def start(mode: str, dsn: str, *extra: str) -> HttpService:
        return http_services(f"pg-{mode}", lambda port: [sys.executable, str(SCRIPT), "--mode", mode,
                                                         "--port", str(port), "--dsn", dsn, *extra],
                             env=os.environ)

    return start


def probe(config: ProbeConfig, address: str, out: Path) -> ProbeResult:
    return run_probe(ProbeSpec(config=config, out_dir=out, upstream=address,
                               plan=ROOT / "harness/plans/probe.yaml"))


def failed(result: ProbeResult) -> set[str]:
    return {inv.name for inv in result.check.invariants if not inv.passed}


def explain(result: ProbeResult) -> str:
    return result.summary() + "\n" + json.dumps(result.violations[:3], default=str)[:3000]


def test_correct_mode_passes_with_two_identities_and_the_database_as_oracle(
        pg_service: Callable[..., HttpService], postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    service = pg_service("correct", postgres_db.dsn)
    result = probe(pg_config(postgres_db.dsn), service.address, tmp_path / "correct")
    assert result.verdict == "pass", explain(result)
    names = {inv.name: inv for inv in result.check.invariants}
    # Every new invariant was exercised, not merely vacuous.
    for name in ("identities_isolated", "one_effect_per_key", "acknowledged_effect_present", "refused_no_effect"):
        assert names[name].checked > 0, name
    kinds = result.check.counts["kinds"]
    assert kinds.get("other_identity") and kinds.get("other_identity_concurrent")
    effects = [json.loads(line) for line in (result.run_dir / "effects.jsonl").read_text().splitlines()]
    assert effects and all(record["count"] <= 2 for record in effects)
    reads = list(iter_operations([result.run_dir / "final-reads.jsonl"]))
    assert any(read.get("read") == "by_id_other" and read.get("status") == 404 for read in reads)
    rows = {row.id: row.status for row in result.conformance}
    assert rows["identity-scoped"] == "pass"


@pytest.mark.parametrize(("mode", "invariant"), [
    ("unscoped-keys", "identities_isolated"),
    ("store-after-commit", "one_effect_per_key"),
    ("check-then-insert", "one_effect_per_key"),
    ("effect-before-check", "refused_no_effect"),
])
def test_each_buggy_mode_fails_by_its_own_invariant(
        mode: str, invariant: str, pg_service: Callable[..., HttpService], postgres_db: PostgresDatabase,
        tmp_path: Path) -> None:
    # store-after-commit's window (the payment committed, its answer not yet stored) is
    # widened to half a second: an impatient client's retry (its first attempt gives up
    # after 20 ms) lands in it whatever the machine's load. At 30 ms a busy machine's
    # scheduling decided whether any retry did (CI saw a PASS).
    extra = ("--publish-ms", "500") if mode == "store-after-commit" else ()
    service = pg_service(mode, postgres_db.dsn, *extra)
    result = probe(pg_config(postgres_db.dsn), service.address, tmp_path / mode)
    assert result.verdict == "fail", explain(result)
    assert invariant in failed(result), explain(result)
    if mode == "unscoped-keys":
        # Bob got Alice's payment and his own was never made: the database says so too.
        assert "acknowledged_effect_present" in failed(result)
        assert {row.id: row.status for row in result.conformance}["identity-scoped"] == "fail"


# --- the probe runs the service itself, its database behind a dependency proxy ------------

def service_config(mode: str, database: PostgresDatabase) -> ProbeConfig:
    """The example's config with `service:` (the probe starts it on {port}) and the
    database as dependency `db` (the service connects through the probe's proxy)."""
    raw = yaml.safe_load(CONFIG.read_text())
    raw["endpoints"][0]["effects"]["dsn"] = database.dsn  # the oracle reads the database directly
    raw.pop("plan")
    raw["load"]["duration"] = "8s"  # the plan's random faults start at 6 s
    raw["service"] = {"command": [sys.executable, str(SCRIPT), "--mode", mode, "--port", "{port}",
                                  "--dsn", f"postgresql://{database.user}@{{dependency.db}}/{database.name}"],
                      "ready": {"path": "/healthz", "timeout": "20s"}}
    raw["dependencies"] = {"db": database.address}
    return parse_config(raw, source=str(CONFIG))


@pytest.mark.parametrize(("mode", "invariant"), [
    ("correct", None),
    ("store-5xx", "replay_fidelity"),
    ("store-5xx-unmarked", "replay_fidelity"),
    ("claim-not-released", "in_flight_refused_or_waited"),
    ("unscoped-keys", "identities_isolated"),
])
def test_under_probe_dependencies_the_database_and_the_process_fail_for_real(
        mode: str, invariant: str | None, postgres_db: PostgresDatabase, tmp_path: Path) -> None:
    """harness/plans/probe-dependencies.yaml: the database slow, gone, resetting; the
    service paused and killed mid-request. The correct mode keeps every invariant
    (nothing stored with a 5xx, the killed request's transaction rolled back); store-5xx
    replays the database's 503."""
    result = run_probe(ProbeSpec(config=service_config(mode, postgres_db), out_dir=tmp_path / mode,
                                 plan=ROOT / "harness/plans/probe-dependencies.yaml"))
    statuses = result.check.counts["statuses"]
    assert any(str(status).startswith("5") for seen in statuses.values() for status in seen), \
        "the dependency faults produced no 5xx: " + json.dumps(statuses)
    faults = (result.run_dir / "faults.jsonl").read_text()
    assert "db" in faults and "kill" in faults
    rows = {row.id: row.status for row in result.conformance}
    if invariant is None:
        assert result.verdict == "pass", explain(result)
        assert rows["no-5xx-replay"] == "pass"
    else:
        assert invariant in failed(result), explain(result)
    if mode == "store-5xx":
        assert rows["no-5xx-replay"] == "fail"
    if mode == "claim-not-released":
        messages = [v["message"] for v in result.violations if v["invariant"] == invariant]
        assert any("stuck in flight" in message for message in messages), explain(result)
    if mode == "store-5xx-unmarked":
        # No answer said it was a replay: the 503 repeated byte for byte while the
        # database was well (outside every fault window, fresh payments succeeding).
        messages = [v["message"] for v in result.violations if v["invariant"] == "replay_fidelity"]
        assert any("without a replay mark" in message for message in messages), explain(result)
        assert rows["no-5xx-replay"] == "fail"


def test_the_plugin_takes_identities_and_effects(pytester: pytest.Pytester, pg_service: Callable[..., HttpService],
                                                 postgres_db: PostgresDatabase) -> None:
    """A team's own test: `idempotency_probe(..., identities=..., effects=...)` on the
    example, the correct mode passing and the unscoped one caught leaking."""
    correct = pg_service("correct", postgres_db.dsn)
    unscoped = pg_service("unscoped-keys", postgres_db.dsn)
    effects = {"dsn": postgres_db.dsn,
               "query": "SELECT id FROM payments WHERE reference = :reference AND amount_cents = :amount_cents"}
    pytester.makepyfile(test_team=f"""
        import pytest

        CONFIG = {{"endpoints": [{{"name": "pay", "path": "/payments", "id": {{"pointer": "/id"}},
                    "body": {{"amount_cents": "{{int:100-999}}", "currency": "EUR", "reference": "r-{{uuid}}"}},
                    "mutate": "amount_cents", "read": {{"path": "/payments/{{id}}"}}, "expect": {{"created": [201]}}}}]}}
        IDENTITIES = [{{"Authorization": "Bearer alice"}}, {{"Authorization": "Bearer bob"}}]
        EFFECTS = {effects!r}

        @pytest.mark.chaos
        @pytest.mark.probe_config(CONFIG, duration=3, plan="probe", identities=IDENTITIES, effects=EFFECTS)
        def test_correct(idempotency_probe):
            result = idempotency_probe({correct.address!r})
            assert result.passed, result.summary()
            names = {{inv.name for inv in result.check.invariants}}
            assert {{"identities_isolated", "one_effect_per_key"}} <= names

        @pytest.mark.chaos
        @pytest.mark.probe_config(CONFIG, duration=3, plan="probe", identities=IDENTITIES, effects={{"pay": EFFECTS}})
        def test_unscoped(idempotency_probe):
            result = idempotency_probe({unscoped.address!r})
            assert any(v["invariant"] == "identities_isolated" for v in result.violations), result.summary()
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)


def test_a_failing_oracle_query_is_exit_2_naming_it(pg_service: Callable[..., HttpService],
                                                    postgres_db: PostgresDatabase, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli.main import main

    service = pg_service("correct", postgres_db.dsn)
    raw = yaml.safe_load(CONFIG.read_text())
    raw["endpoints"][0]["effects"] = {"dsn": postgres_db.dsn, "query": "SELECT id FROM paymentz WHERE reference = :reference"}
    raw["load"]["duration"] = "2s"
    raw.pop("plan")
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["probe", "--config", str(path), "--upstream", service.address, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("harness: effects of create-payment: query 'SELECT id FROM paymentz") and \
        'relation "paymentz" does not exist' in err[-1]
