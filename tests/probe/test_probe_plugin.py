"""The pytest plugin (entry point pytest11), tested with pytester: a project's own test
file uses the fixtures and markers exactly as docs/probe.md shows."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from probe_helpers import ROOT
from test_messages_rabbitmq import consumer_config

from tests.support.postgres import PostgresServer
from tests.support.rabbitmq import RabbitServer

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.slow


def test_markers_are_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["*@pytest.mark.chaos:*", "*@pytest.mark.chaos_stack(*", "*@pytest.mark.probe_config(*"])


def test_a_team_adds_a_chaos_check_in_a_few_lines(pytester: pytest.Pytester, example_service) -> None:
    fixed, naive = example_service("fixed"), example_service("naive")
    pytester.makepyfile(test_payments=f"""
        import pytest

        CONFIG = {str(ROOT / "examples/payments_service.yaml")!r}
        PLAN = {str(ROOT / "harness/plans/probe.yaml")!r}

        @pytest.mark.chaos
        @pytest.mark.probe_config(CONFIG, duration=3, plan=PLAN)
        def test_fixed_service_is_idempotent(idempotency_probe):
            result = idempotency_probe({fixed.address!r})
            assert result.passed, result.summary()
            assert (result.run_dir / "report.html").exists()

        @pytest.mark.chaos
        @pytest.mark.probe_config(CONFIG, duration=3)
        def test_naive_service_is_caught(idempotency_probe):
            result = idempotency_probe("http://{naive.address}")
            assert result.verdict == "fail"
            assert any(v["invariant"] == "one_resource_per_key" for v in result.violations)

        def test_toxiproxy_fixture(toxiproxy):
            import requests
            assert requests.get(toxiproxy.url + "/version", timeout=5).json()["version"]
            assert toxiproxy.embedded
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-m", "chaos or not chaos")
    result.assert_outcomes(passed=3)
    deselected = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-m", "not chaos")
    deselected.assert_outcomes(passed=1, deselected=2)


def test_chaos_stack_fixture_starts_and_stops_the_stack(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_stack="""
        import pytest, requests

        @pytest.mark.chaos_stack(app_workers=1, consumers=0)
        def test_stack(chaos_stack):
            app = chaos_stack.info.app_url
            assert requests.get(app + "/healthz", timeout=5).status_code == 200
            pytest.stack_root = chaos_stack.root
    """, conftest="""
        import pytest

        def pytest_sessionfinish(session):
            root = getattr(pytest, "stack_root", None)
            (session.config.rootpath / "root.txt").write_text(str(root))
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)
    root = Path((pytester.path / "root.txt").read_text())
    assert root.is_dir(), root
    assert not (root / "state.json").exists(), "the stack was stopped after the test"


def test_a_team_probes_its_message_consumer_with_messages(pytester: pytest.Pytester, rabbitmq_server: RabbitServer,
                                                          rabbitmq_queue: str, postgres_server: PostgresServer,
                                                          tmp_path: Path) -> None:
    """`idempotency_probe(service=..., dependencies=..., messages=[...])` on a real RabbitMQ
    and PostgreSQL: the correct example consumer passes probe-redelivery, the auto-ack one
    is caught by published_fact_applied, and the summary names the messages played."""
    sections = {}
    names = [f"plugin_{mode.replace('-', '_')}_{os.getpid()}" for mode in ("correct", "auto-ack")]
    for mode, name in zip(("correct", "auto-ack"), names, strict=True):
        db = postgres_server.create_database(name)
        raw = consumer_config(mode, rabbitmq_server, f"{rabbitmq_queue}-{mode}", db)
        sections[mode] = {name: raw[name] for name in ("service", "dependencies", "messages")}
    pytester.makepyfile(test_consumer=f"""
        import pytest

        SECTIONS = {sections!r}

        @pytest.mark.chaos
        def test_correct_consumer_takes_each_payment_once(idempotency_probe):
            result = idempotency_probe(**SECTIONS["correct"], plan="probe-redelivery", duration=5)
            assert result.passed, result.summary()
            assert "messages published" in result.summary() and "requests" not in result.summary()
            assert result.check.counts["messages"]["payments"]["redeliveries"] > 0

        @pytest.mark.chaos
        def test_auto_ack_consumer_is_caught(idempotency_probe):
            result = idempotency_probe(**SECTIONS["auto-ack"], plan="probe-redelivery", duration=5)
            assert result.verdict == "fail", result.summary()
            assert any(v["invariant"] == "published_fact_applied" for v in result.violations)
    """)
    try:
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", "-p", "no:logging")
    finally:
        for name in names:
            postgres_server.drop_database(name)
    result.assert_outcomes(passed=2)
