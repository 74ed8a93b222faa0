"""`harness probe` with `clock:` windows on the service it starts (harness.probe.clocks):
the service runs under libfaketime, each change is verified on its `Date` header, and a
service whose clock does not move (started around the fake clock) fails the run with
exit 2. Plans that name a clock the probe has none of are refused before the run.

These tests need Debian's libfaketime (`apt-get install faketime`, done by
./scripts/setup.sh); without it they fail saying so, never skip."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.nemesis.fake_clock import ClockUnavailable, libfaketime_path
from harness.nemesis.plans import PlanError
from harness.probe.plan_targets import ProbeTargets, parse_probe_plan
from tests.probe.probe_helpers import ROOT

PLAN = """seed: 1
windows:
  - {at: 0.3s, for: 0.5s, clock: {target: service, jump: 2h}}
  - {at: 0.8s, for: 0.8s, clock: {target: service, strobe: {delta: 5s, every: 0.3s}}}
"""


def _config(tmp_path: Path, *, wrap: list[str]) -> Path:
    command = [*wrap, sys.executable, str(ROOT / "examples/payments_service.py"), "--mode", "fixed",
               "--port", "{port}", "--db", ":memory:", "--work-ms", "5"]
    (tmp_path / "clock.yaml").write_text(PLAN)
    path = tmp_path / "probe.yaml"
    path.write_text(f"""service:
  command: {json.dumps(command)}
  ready: {{path: /healthz, timeout: 20s}}
endpoints:
  - {{name: pay, path: /payments, body: {{amount_cents: "{{int:100-999}}", currency: EUR, reference: "{{uuid}}"}},
     id: {{pointer: /id}}, expect: {{created: [201]}}}}
load: {{users: 2, duration: 2s}}
plan: {tmp_path / "clock.yaml"}
""")
    return path


@pytest.fixture(autouse=True)
def _libfaketime() -> None:
    try:
        libfaketime_path()
    except ClockUnavailable as error:
        pytest.fail(str(error))


def test_the_service_clock_jumps_and_strobes_verified_on_its_date_header(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(["probe", "--config", str(_config(tmp_path, wrap=[])), "--out", str(out)])
    summary = capsys.readouterr().out
    assert code == 0, summary
    faults = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()]
    assert [(f["clock"], f["error"]) for f in faults] == [("jump", None), ("strobe", None)], faults
    jump, strobe = faults
    assert abs(jump["observed_offset"] - 7200) < 2.0
    # The jump stays: the strobe flips around it.
    assert strobe["offset_before"] == 7200.0 and abs(strobe["observed_offset"] - 7205) < 2.0
    assert strobe["flips"] >= 1
    assert (out / "clocks" / "service.offset").read_text().strip() == "+7200"


def test_a_service_started_around_the_fake_clock_fails_the_window_with_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`env -u LD_PRELOAD` drops libfaketime before the service starts: its Date header
    keeps the real time, so the jump cannot be verified, and the run is the harness's
    failure, not a verdict."""
    monkeypatch.setattr("harness.nemesis.clock_faults.VERIFY_TIMEOUT", 1.0)
    out = tmp_path / "run"
    code = main(["probe", "--config", str(_config(tmp_path, wrap=["env", "-u", "LD_PRELOAD"])), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2, captured.out + captured.err
    assert "did not move to +7200s" in captured.err and "is it running under the fake clock" in captured.err
    assert not (out / "result.json").exists()


@pytest.mark.parametrize("targets, target, words", [
    (ProbeTargets.plain(("db",)), "service", "needs `service:` in the probe config"),
    (ProbeTargets.plain(("db",), service=True), "db", "dependency 'db' is an address the probe does not start"),
    (ProbeTargets.plain(service=True), "redis", "no process 'redis' to move the clock of"),
])
def test_a_clock_the_probe_does_not_have_is_refused_naming_the_field(targets: ProbeTargets, target: str,
                                                                     words: str) -> None:
    raw = {"seed": 1, "windows": [{"at": "1s", "for": "1s", "clock": {"target": target, "jump": "1h"}}]}
    with pytest.raises(PlanError) as caught:
        parse_probe_plan(raw, source="p.yaml", targets=targets)
    message = str(caught.value)
    assert message.startswith("p.yaml: windows[0].clock.target: ") and words in message, message
