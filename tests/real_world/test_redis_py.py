"""redis-py's default client, probed as deployed: examples/real-world/redis_py_payments_app.py
(a Flask payments service whose Idempotency-Key layer is correct, on
`redis.Redis(host=..., port=...)` with nothing tuned) started by the probe behind a proxy
to the test's own redis-server (examples/real-world/redis-py-payments.yaml), its ledger
entries per key counted through its GET /ledger.

The client's default Retry re-sends a whole MULTI/EXEC whose reply was lost after Redis
ran it, so the charge's ledger entry lands twice: under the plan
examples/real-world/redis-lost-replies.yaml (each window cuts the reply of the next
charge on every open connection) the default client FAILs by `one_effect_per_key` and
by nothing else, every violation being one ledger entry (one id) stored twice; with
`--no-retry` (`Retry(NoBackoff(), 0)`) the same service PASSes that plan and the bundled
`probe-dependencies`. Under `probe-dependencies` alone the default client meets a lost
EXEC reply only in some runs (its reset_peer at toxicity 0.5 resets a connection at its
first reply, a claim as often as a charge: 2 FAILs in 7 runs measured), so that run may
pass but may break nothing else.

redis-py is the project's own dependency (`redis>=5.0`), not pinned here: the test checks
the finding's premise instead (the default constructor retries a ConnectionError, and
`from_url` does not), so a release that changes those defaults fails it (never skips).
Read the finding again, then update this test and examples/real-world/README.md
together (measured with redis-py 8.2.0).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.retry import Retry

from harness.probe.config import load_config
from harness.probe.runner import ProbeResult, ProbeSpec, run_probe
from harness.stack.redis_server import RedisServer
from tests.support.registry import registry_for_session

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "real-world"
CONFIG = EXAMPLES / "redis-py-payments.yaml"
LOST_REPLIES = EXAMPLES / "redis-lost-replies.yaml"
EFFECT = "one_effect_per_key"


@pytest.fixture(scope="module", autouse=True)
def _registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # The runs' leases (the service's process group) go to a registry of this module's own.
    yield from registry_for_session(tmp_path_factory)


def probe(tmp_path: Path, redis_server: RedisServer, redis_url: str, *, no_retry: bool,
          plan: Path | None) -> ProbeResult:
    """The example config, its service on this interpreter and the test's Redis database
    (`redis_url` is a fresh one), under `plan` (None: the config's probe-dependencies)."""
    config = load_config(CONFIG)
    assert config.service is not None
    database = redis_url.rsplit("/", 1)[1]
    command = (sys.executable, *config.service.command[1:], "--redis-db", database,
               *(("--no-retry",) if no_retry else ()))
    config = replace(config, service=replace(config.service, command=command),
                     dependencies={"cache": f"{redis_server.host}:{redis_server.port}"})
    return run_probe(ProbeSpec(config=config, out_dir=tmp_path / "probe", plan=plan))


def broken(result: ProbeResult) -> set[str]:
    return {inv.name for inv in result.check.invariants if not inv.passed}


def faults(result: ProbeResult) -> list[dict[str, Any]]:
    lines = (result.run_dir / "faults.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def statuses(result: ProbeResult) -> set[str]:
    return {status for kind in result.document["counts"]["statuses"].values() for status in kind}


def retry_of(client: redis.Redis) -> Retry:
    """The Retry of a connection the client's pool makes (built, never connected)."""
    connection = client.connection_pool.make_connection()
    assert isinstance(connection, redis.Connection)
    return connection.retry


def test_redis_py_defaults_are_the_ones_the_finding_needs() -> None:
    hint = f"redis-py {redis.__version__} changed its defaults: read the finding again (module docstring)"
    default = retry_of(redis.Redis(host="127.0.0.1", port=6379))
    calls: list[int] = []

    def lost_once() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise redis.ConnectionError("reply lost")
        return "sent again"

    # What Pipeline.execute does with a transaction: the whole send-and-read in this call.
    assert default.call_with_retry(lost_once, lambda error: None) == "sent again", hint
    from_url = retry_of(redis.Redis.from_url("redis://127.0.0.1:6379/0"))
    assert from_url.get_retries() == 0, hint


def test_the_default_client_re_sends_a_charge_whose_exec_reply_was_lost(
        tmp_path: Path, redis_server: RedisServer, redis_url: str) -> None:
    result = probe(tmp_path, redis_server, redis_url, no_retry=False, plan=LOST_REPLIES)
    assert result.verdict == "fail", result.summary()
    assert broken(result) == {EFFECT}, result.summary()
    played = faults(result)
    assert [fault["type"] for fault in played] == ["limit_data"] * 4 and all(f["error"] is None for f in played)
    violations = next(inv.violations for inv in result.check.invariants if inv.name == EFFECT)
    for violation in violations:
        ids = violation["evidence"]["ids"]
        # One ledger entry, stored more than once: the same transaction sent again, not a
        # second request that got past the key (that would be a second entry id).
        assert len(ids) >= 2 and len(set(ids)) == 1, violation
    # The retry hides every lost reply: the service never saw an error to answer 5xx with.
    assert not any(status.startswith("5") for status in statuses(result)), statuses(result)


@pytest.mark.parametrize("plan", [LOST_REPLIES, None], ids=["lost-replies", "probe-dependencies"])
def test_without_the_retry_the_service_passes(tmp_path: Path, redis_server: RedisServer, redis_url: str,
                                              plan: Path | None) -> None:
    result = probe(tmp_path, redis_server, redis_url, no_retry=True, plan=plan)
    assert result.verdict == "pass", result.summary()
    assert EFFECT in {inv.name for inv in result.check.invariants}
    assert all(fault["error"] is None for fault in faults(result))
    # The faults reached it: lost replies (and Redis gone) were answered 503, never stored.
    assert any(status.startswith("5") for status in statuses(result)), statuses(result)
    if plan is None:
        done = {fault["type"] or fault["action"] or fault["kind"] for fault in faults(result)}
        assert {"latency", "proxy_down", "reset_peer", "pause", "kill"} <= done, done


def test_under_probe_dependencies_the_default_client_breaks_nothing_else(
        tmp_path: Path, redis_server: RedisServer, redis_url: str) -> None:
    # A lost EXEC reply here is luck (see the module docstring): FAIL by it, or PASS.
    result = probe(tmp_path, redis_server, redis_url, no_retry=False, plan=None)
    assert broken(result) <= {EFFECT}, result.summary()
    assert result.verdict == ("fail" if broken(result) else "pass"), result.summary()
