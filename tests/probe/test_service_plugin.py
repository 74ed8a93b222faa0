"""The pytest plugin's `idempotency_probe(service=..., dependencies=...)`: a team's test
has the probe start its service (no upstream), checked as a config's `service:` is."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from probe_helpers import ROOT

from tests.support.registry import registry_for_session

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # The inner session's runs keep their leases in a registry of this module's own.
    yield from registry_for_session(tmp_path_factory)


def test_a_team_has_the_probe_run_its_service(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_payments=f"""
        import pytest
        from harness.probe.config import ProbeConfigError
        from harness.probe.runner import ProbeError

        CONFIG = {str(ROOT / "examples/payments_service.yaml")!r}
        SERVICE = [{sys.executable!r}, {str(ROOT / "examples/payments_service.py")!r},
                   "--mode", "fixed", "--port", "{{port}}"]

        @pytest.mark.chaos
        def test_the_probe_starts_and_stops_the_service(idempotency_probe):
            result = idempotency_probe(config=CONFIG, duration=3,
                                       service={{"command": SERVICE, "ready": "/healthz"}})
            assert result.passed, result.summary()
            assert result.document["upstream"].startswith("127.0.0.1:")
            assert "payments service (fixed)" in (result.run_dir / "service.log").read_text()

        def test_a_command_alone_will_do_and_faults_reach_the_process(idempotency_probe, tmp_path):
            plan = tmp_path / "plan.yaml"
            plan.write_text("seed: 1\\nwindows:\\n  - {{at: 1s, for: 0.5s, process: {{action: pause, service: service}}}}\\n")
            result = idempotency_probe(config=CONFIG, duration=3, service=SERVICE, plan=str(plan))
            assert result.document["faults"][0]["action"] == "pause"
            assert result.document["faults"][0]["error"] is None

        def test_upstream_and_service_together_are_refused(idempotency_probe):
            with pytest.raises(ProbeConfigError, match="upstream: not with `service:`"):
                idempotency_probe(config={{"upstream": "127.0.0.1:9", "endpoints": [
                    {{"path": "/p", "body": {{"a": "{{uuid}}"}}, "id": {{"pointer": "/id"}}}}]}}, service=SERVICE)
            with pytest.raises(ProbeError, match="--upstream: not with `service:`"):
                idempotency_probe("127.0.0.1:9", CONFIG, service=SERVICE)

        def test_a_bad_dependency_names_its_field(idempotency_probe):
            with pytest.raises(ProbeConfigError, match=r"idempotency_probe: dependencies.db: must be host:port"):
                idempotency_probe(config=CONFIG, service=SERVICE, dependencies={{"db": "nowhere"}})
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=4)
