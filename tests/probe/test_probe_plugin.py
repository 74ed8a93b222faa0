"""The pytest plugin (entry point pytest11), tested with pytester: a project's own test
file uses the fixtures and markers exactly as docs/probe.md shows."""

from __future__ import annotations

from pathlib import Path

import pytest
from probe_helpers import ROOT

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
