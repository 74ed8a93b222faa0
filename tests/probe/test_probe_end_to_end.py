"""`harness probe` end to end: real services behind the embedded Toxiproxy, Locust
duplicates under harness/plans/probe.yaml, a verdict and a report directory.

The probe must find the naive example's check-then-insert race and pass its fixed
variant; pass the target app through its public API and fail each of its API-layer
negative controls."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from probe_helpers import PROBE_SECONDS, ROOT

from harness.cli.main import main
from harness.probe.config import load_config
from harness.probe.runner import ProbeSpec, run_probe

pytestmark = pytest.mark.slow


def probe(config_path: Path, address: str, out: Path):
    config = load_config(config_path)
    config = replace(config, load=replace(config.load, duration=PROBE_SECONDS))
    return run_probe(ProbeSpec(config=config, out_dir=out, upstream=address))


def test_naive_example_race_is_found(example_service, tmp_path: Path) -> None:
    service = example_service("naive")
    result = probe(ROOT / "examples/payments_service.yaml", service.address, tmp_path / "naive")
    assert result.verdict == "fail", result.summary()
    failed = {inv.name for inv in result.check.invariants if not inv.passed}
    assert "one_resource_per_key" in failed
    # The naive layer refuses mismatches and missing keys correctly: only the race shows.
    assert not failed & {"payload_mismatch_refused", "missing_key_refused"}
    rows = {row.id: row.status for row in result.conformance}
    assert rows["enforce-once"] == "fail"
    # The service's own final answers show the second resource too, not only the clients.
    searches = [json.loads(line) for line in (result.run_dir / "final-reads.jsonl").read_text().splitlines()]
    assert any(len(record.get("found") or []) > 1 for record in searches)


def test_fixed_example_passes_and_writes_the_report(example_service, tmp_path: Path) -> None:
    service = example_service("fixed")
    result = probe(ROOT / "examples/payments_service.yaml", service.address, tmp_path / "fixed")
    assert result.verdict == "pass", result.summary() + json.dumps(result.violations[:2], default=str)
    counts = result.check.counts
    assert counts["kinds"].get("double_click") and counts["kinds"].get("payload_mismatch")
    assert counts["final_reads"] > 0
    assert {p.name for p in result.run_dir.iterdir()} >= {"result.json", "junit.xml", "report.html",
                                                         "faults.jsonl", "history", "config.json"}
    document = json.loads((result.run_dir / "result.json").read_text())
    assert document["verdict"] == "pass" and document["faults"], "the plan's windows were applied"
    rows = {row["id"]: row["status"] for row in document["conformance"]}
    assert rows["mismatch-422"] == rows["missing-400"] == rows["enforce-once"] == "pass"
    html = (result.run_dir / "report.html").read_text()
    assert "Conformance" in html and "Error Handling" in html and "PASS" in html
    assert 'failures="0"' in (result.run_dir / "junit.xml").read_text()


def test_target_app_passes_through_its_public_api(target_app, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    service = target_app("")
    out = tmp_path / "correct"
    code = main(["probe", "--config", str(ROOT / "examples/target_app_probe.yaml"), "--upstream",
                 service.address, "--out", str(out), "--duration", f"{PROBE_SECONDS}s"])
    assert code == 0, capsys.readouterr().out
    assert capsys.readouterr().out.startswith("PASS: all 7 probe invariants held")


@pytest.mark.parametrize("control, caught_by", [
    ("api", "one_resource_per_key"),
    ("api-fingerprint", "payload_mismatch_refused"),
])
def test_target_app_negative_controls_fail(target_app, tmp_path: Path, control: str, caught_by: str) -> None:
    service = target_app(control)
    result = probe(ROOT / "examples/target_app_probe.yaml", service.address, tmp_path / control)
    assert result.verdict == "fail", result.summary()
    assert caught_by in {inv.name for inv in result.check.invariants if not inv.passed}


def readme_probe_command() -> list[str]:
    """The one-endpoint command of the README's "Test your own service", as argv."""
    import re
    import shlex

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Test your own service", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "the README's 'Test your own service' section must show the one-endpoint command"
    argv = shlex.split(block.group(1).replace("\\\n", " "))
    assert argv[:2] == [".venv/bin/harness", "probe"], argv
    return argv[1:]


def test_the_readmes_one_endpoint_command_probes_the_example(example_service, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # The README's first screen shows the probe: its command must run as written, here
    # against the example service in both modes (only the address and the length differ).
    readme = (ROOT / "README.md").read_text()
    assert readme.index("## Test your own service") < readme.index("## What it does")
    argv = readme_probe_command()
    argv[argv.index("--duration") + 1] = f"{PROBE_SECONDS}s"
    for mode, expected in (("fixed", 0), ("naive", 1)):
        service = example_service(mode)
        args = list(argv)
        args[args.index("--upstream") + 1] = service.address
        code = main([*args, "--out", str(tmp_path / mode)])
        out = capsys.readouterr().out
        assert code == expected, out
