"""Key lifetimes (harness.probe.aged_retries, the bundled plan `probe-clocks`): keys
that succeeded are sent again with the service's clock moved to 50 % and 99 % of the
declared `key_lifetime`, judged by the usual invariants, and past it, reported only.
The negative control is the payments example with `--forget-keys-after 3600` (a store
that keeps keys 1 h while the endpoint declares 24 h): it must FAIL; the same example
keeping its keys must PASS.

These tests need Debian's libfaketime (`apt-get install faketime`, done by
./scripts/setup.sh); without it they fail saying so, never skip."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.nemesis.fake_clock import ClockUnavailable, libfaketime_path
from harness.nemesis.plans import PlanError, parse_plan
from harness.probe.config import ProbeConfigError, parse_config
from harness.probe.plan_targets import ProbeTargets, parse_probe_plan
from tests.probe.probe_helpers import ROOT


@pytest.fixture(autouse=True)
def _libfaketime() -> None:
    try:
        libfaketime_path()
    except ClockUnavailable as error:
        pytest.fail(str(error))


def _config(tmp_path: Path, *, forget: int, lifetime: str | None = "24h") -> Path:
    command = [sys.executable, str(ROOT / "examples/payments_service.py"), "--mode", "fixed", "--port", "{port}",
               "--db", ":memory:", "--work-ms", "5", "--forget-keys-after", str(forget)]
    declared = f", key_lifetime: {lifetime}" if lifetime else ""
    path = tmp_path / "probe.yaml"
    path.write_text(f"""service:
  command: {json.dumps(command)}
  ready: {{path: /healthz, timeout: 20s}}
endpoints:
  - {{name: pay, path: /payments, body: {{amount_cents: "{{int:100-999}}", currency: EUR, reference: "{{uuid}}"}},
     id: {{pointer: /id}}, search: {{path: "/payments?idempotency_key={{key}}", items: /items}},
     expect: {{created: [201]}}{declared}}}
load: {{users: 2, duration: 2s}}
plan: probe-clocks
""")
    return path


def _probe(tmp_path: Path, capsys: pytest.CaptureFixture[str], **options: object) -> tuple[int, str, str, Path]:
    out = tmp_path / "run"
    code = main(["probe", "--config", str(_config(tmp_path, **options)), "--out", str(out)])  # type: ignore[arg-type]
    captured = capsys.readouterr()
    return code, captured.out, captured.err, out


def test_a_store_that_keeps_its_keys_passes_and_past_the_lifetime_is_only_reported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err, run = _probe(tmp_path, capsys, forget=0)
    assert code == 0 and out.startswith("PASS"), out + err
    clocks = json.loads((run / "clocks.json").read_text())
    assert clocks["key_lifetimes"] == {"pay": {"seconds": 86400.0, "assumed": False}}
    stages = [(s["fraction"], s["offset"], s["judged"]) for s in clocks["stages"]]
    assert stages == [(0.5, 43200.0, True), (0.99, 85536.0, True), (1.01, 87264.0, False)]
    assert all(s["sent"] > 0 for s in clocks["stages"])
    assert "past the key lifetime (101%)" in err and "reported, not judged" in err
    faults = [json.loads(line) for line in (run / "faults.jsonl").read_text().splitlines()]
    assert [round(f["observed_offset"] / 3600) for f in faults] == [12, 24, 24] and all(f["error"] is None
                                                                                         for f in faults)
    aged = [json.loads(line) for path in (run / "history").glob("aged-*.jsonl")
            for line in path.read_text().splitlines()]
    assert any(op.get("expect") == "aged_retry" for op in aged)


def test_a_store_that_forgets_keys_after_an_hour_while_declaring_a_day_fails(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err, run = _probe(tmp_path, capsys, forget=3600)
    assert code == 1, out + err
    assert "one_resource_per_key" in out, out
    assert "made another" in err


def test_without_key_lifetime_24h_is_assumed_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err, run = _probe(tmp_path, capsys, forget=0, lifetime=None)
    assert code == 0, out + err
    assert "pay: no key_lifetime declared; assumed 24h" in err
    assert json.loads((run / "clocks.json").read_text())["key_lifetimes"]["pay"]["assumed"] is True


@pytest.mark.parametrize("lifetime, words", [("-1h", "not a duration"), ("0s", "must be longer than 0s")])
def test_a_bad_key_lifetime_names_the_field(lifetime: str, words: str) -> None:
    raw = {"upstream": "127.0.0.1:1", "endpoints": [{"path": "/p", "body": {"r": "{uuid}"}, "id": {"pointer": "/id"},
                                                      "key_lifetime": lifetime}]}
    with pytest.raises(ProbeConfigError) as caught:
        parse_config(raw, source="probe.yaml")
    message = str(caught.value)
    assert message.startswith("probe.yaml: endpoints[0].key_lifetime: ") and words in message, message


def test_aged_retries_need_the_service_and_a_probe() -> None:
    raw = {"seed": 1, "aged_retries": {"within": ["50%"]}}
    with pytest.raises(PlanError, match=r"p.yaml: aged_retries: .* give `service:`"):
        parse_probe_plan(raw, source="p.yaml", targets=ProbeTargets.plain())
    with pytest.raises(PlanError, match=r"s.yaml: aged_retries: only `harness probe`"):
        parse_plan(raw, source="s.yaml")
    with pytest.raises(PlanError, match=r"aged_retries.within"):
        parse_probe_plan({"seed": 1, "aged_retries": {"within": ["150%"]}}, source="p.yaml",
                         targets=ProbeTargets.plain(service=True))
