"""The framework matrix: a minimal correct payments service and its check-then-act twin
in FastAPI, Flask and Django REST Framework (examples/frameworks/), each written the
framework's natural way, probed with one config under the bundled `probe` plan.

By default every correct one PASSes with its advice named (each framework's own
answers miss some of the draft's SHOULDs) and every buggy one FAILs by
`one_resource_per_key`; under `--strict` the correct ones FAIL by `should_rows` alone.
The frameworks are the `frameworks` extra (pip install -e '.[frameworks]')."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
from probe_helpers import PROBE_SECONDS, ROOT

from harness.cli.main import main
from harness.probe.levels import STRICT_INVARIANT

pytestmark = pytest.mark.slow

CONFIG = ROOT / "examples/frameworks/payments.yaml"
# The modules each service imports, and the advice its framework's defaults earn (the
# answers seen by hand: FastAPI 422 for a missing header, DRF 400 for a reused key,
# none of them problem details).
FRAMEWORKS = {
    "fastapi": (("fastapi", "uvicorn"), {"missing-400", "error-doc"}),
    "flask": (("flask",), {"error-doc"}),
    "drf": (("django", "rest_framework"), {"mismatch-422", "error-doc"}),
}


@pytest.fixture
def framework_service(http_services):
    def start(framework: str, mode: str):
        missing = [name for name in FRAMEWORKS[framework][0] if importlib.util.find_spec(name) is None]
        if missing:
            pytest.fail(f"{', '.join(missing)} not installed: pip install -e '.[frameworks]' (or '.[dev]')")
        script = str(ROOT / f"examples/frameworks/{framework}_payments.py")
        return http_services(f"{framework}-{mode}",
                             lambda port: [sys.executable, script, "--mode", mode, "--port", str(port)],
                             env=os.environ)

    return start


def probe(address: str, out: Path, *extra: str) -> tuple[int, dict]:
    code = main(["probe", "--config", str(CONFIG), "--upstream", address, "--out", str(out),
                 "--duration", f"{PROBE_SECONDS}s", *extra])
    return code, json.loads((out / "result.json").read_text())


def broken(document: dict) -> set[str]:
    return {inv["name"] for inv in document["invariants"] if not inv["passed"]}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_the_correct_service_passes_with_its_advice_and_fails_only_strictly(
        framework_service, tmp_path: Path, capsys: pytest.CaptureFixture[str], framework: str) -> None:
    service = framework_service(framework, "correct")
    code, document = probe(service.address, tmp_path / "default")
    summary = capsys.readouterr().out
    assert code == 0 and document["verdict"] == "pass", summary
    advice = {item["rule"] for item in document["advice"]}
    assert advice == FRAMEWORKS[framework][1], document["advice"]
    assert all(f"{rule} (SHOULD)" in summary for rule in advice), summary
    code, document = probe(service.address, tmp_path / "strict", "--strict")
    assert code == 1 and broken(document) == {STRICT_INVARIANT}, capsys.readouterr().out
    rules = {v["evidence"]["rule"] for inv in document["invariants"] if inv["name"] == STRICT_INVARIANT
             for v in inv["violations"]}
    assert rules == FRAMEWORKS[framework][1]


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_the_check_then_act_twin_fails(framework_service, tmp_path: Path, framework: str) -> None:
    service = framework_service(framework, "check-then-act")
    code, document = probe(service.address, tmp_path / "buggy")
    assert code == 1 and "one_resource_per_key" in broken(document), document["counts"]
