"""A plan's `provider_fault:` windows (harness.probe.provider.plan): parsed beside the
nemesis's own kinds, refused without a provider, armed on a real provider and read back,
healed alone (the config's rules stay), and recorded with the hits the provider counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

from harness.nemesis.plans import PlanError
from harness.nemesis.toxiproxy_client import NemesisError
from harness.probe.plan_targets import ProbeTargets, parse_probe_plan, probe_windows
from harness.probe.provider.plan import ProviderPlanFault, bind_provider_faults
from harness.provider.control import ProviderControl
from harness.provider.faults import FaultRule
from harness.provider.server import EmbeddedProvider, ProviderConfig

KEY = "sk_test_plan_faults"
WITH_PROVIDER = ProbeTargets.plain(("provider",), service=True)
FAULT = {"operation": "payment_intents.create", "status": 500, "when": "after"}


def plan(*windows: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"seed": 1, "windows": list(windows), **extra}


def test_provider_windows_sit_beside_toxics_and_keep_their_place_in_the_schedule() -> None:
    raw = plan({"at": "0.2s", "for": "1s", "toxic": {"proxy": "provider", "type": "latency",
                                                   "attributes": {"latency": 100}}},
               {"at": "0.5s", "for": "2s", "provider_fault": {**FAULT, "delay": "300ms"}})
    parsed = parse_probe_plan(raw, source="p.yaml", targets=WITH_PROVIDER)
    windows = probe_windows(parsed, 10.0, WITH_PROVIDER)
    assert [w.name for w in windows] == ["w0-provider-latency-downstream", "w1-provider-500-after"]
    fault = windows[1].fault
    assert isinstance(fault, ProviderPlanFault) and (windows[1].at, windows[1].duration) == (0.5, 2.0)
    assert fault.rule == FaultRule(operation="payment_intents.create", status=500, when="after", delay=0.3)
    alone = parse_probe_plan(plan({"at": 0, "for": 1, "provider_fault": FAULT}), source="p.yaml",
                             targets=WITH_PROVIDER)
    assert [type(w.fault) for w in alone.windows] == [ProviderPlanFault]


@pytest.mark.parametrize(("raw", "message"), [
    (plan({"at": 0, "for": 1, "provider_fault": {**FAULT, "status": 503}}), r"windows\[0\]\.provider_fault: fault status"),
    (plan({"at": 0, "for": 0, "provider_fault": FAULT}), r"windows\[0\]\.for: must be longer"),
    (plan({"for": 1, "provider_fault": FAULT}), r"windows\[0\]: needs at"),
    (plan({"at": 0, "for": 1, "provider_fault": {"operation": "charges.create"}}),
     r"windows\[0\]\.provider_fault\.operation"),
    (plan({"at": 0, "for": 1, "provider_fault": FAULT, "toxicity": 1}), r"windows\[0\]: unknown field"),
    ({"seed": 1, "random": {"every": "2s", "duration": "1s", "faults": [{"provider_fault": FAULT}]}},
     r"random\.faults\[0\]\.provider_fault: only an explicit window"),
])
def test_bad_provider_windows_are_one_line_naming_the_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanError, match=rf"^p\.yaml: {message}") as error:
        parse_probe_plan(raw, source="p.yaml", targets=WITH_PROVIDER)
    assert "\n" not in str(error.value)


def test_a_provider_fault_needs_a_provider() -> None:
    with pytest.raises(PlanError, match=r"windows\[0\]\.provider_fault: a provider fault needs"):
        parse_probe_plan(plan({"at": 0, "for": 1, "provider_fault": FAULT}), source="p.yaml",
                         targets=ProbeTargets.plain(service=True))


def test_an_unbound_fault_fails_its_window() -> None:
    with pytest.raises(NemesisError, match="needs the run's provider"):
        ProviderPlanFault(FaultRule(**FAULT)).apply(object(), "w0")  # type: ignore[arg-type]


def test_the_window_arms_reads_back_heals_alone_and_records_the_hits(tmp_path: Path) -> None:
    kept = FaultRule(operation="refunds.create", status=429, when="before")
    with EmbeddedProvider(ProviderConfig(api_keys=frozenset({KEY}))) as provider:
        provider.add_fault(kept)  # a config fault: the window's heal must leave it in force
        control = ProviderControl(provider.url, KEY)
        parsed = parse_probe_plan(plan({"at": 0, "for": 1, "provider_fault": FAULT}), source="p.yaml",
                                  targets=WITH_PROVIDER)
        [window] = bind_provider_faults(probe_windows(parsed, 5.0, WITH_PROVIDER), control)
        fault = window.fault
        fault.apply(object(), window.name)  # type: ignore[arg-type]
        assert [rule for rule, _ in control.faults()] == [kept, FaultRule(**FAULT)]
        session = requests.Session()
        session.headers["Authorization"] = f"Bearer {KEY}"
        answer = session.post(f"{provider.url}/v1/payment_intents", data={"amount": 100, "currency": "eur"},
                              timeout=10)
        assert answer.status_code == 500  # the plan's rule played, after the intent was made
        assert provider.ledger.intents  # the operation ran: only the answer is the error
        fault.heal(object(), window.name)  # type: ignore[arg-type]
        assert [rule for rule, _ in control.faults()] == [kept]
        again = session.post(f"{provider.url}/v1/payment_intents", data={"amount": 100, "currency": "eur"},
                             timeout=10)
        assert again.status_code == 200
        record = fault.record(window.name)
        assert (record["kind"], record["target"], record["type"], record["action"]) == (
            "provider_fault", "provider", "payment_intents.create", "500 after")
        assert record["hits"] == 1
        with pytest.raises(NemesisError, match="not healed"):  # its rule is gone: a second heal says so
            fault.heal(object(), window.name)  # type: ignore[arg-type]


def test_the_window_fails_when_the_provider_does_not_arm_it(tmp_path: Path) -> None:
    with EmbeddedProvider(ProviderConfig(api_keys=frozenset({KEY}))) as provider:
        control = ProviderControl(provider.url, "sk_test_not_accepted")  # refused: nothing armed
        fault = ProviderPlanFault(FaultRule(**FAULT), control=control)
        with pytest.raises(NemesisError, match="provider fault"):
            fault.apply(object(), "w0")  # type: ignore[arg-type]
        assert provider.faults.active() == []
