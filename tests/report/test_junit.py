"""junit.xml: one test case per invariant, failures carry messages and evidence."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from report_sample import base_result, typed

from harness.report.junit import junit_xml, write_junit
from harness.report.run_report import write_reports
from harness.run.rundir import RunDir


def test_one_testcase_per_invariant_and_failures(
    failing_run: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, result = failing_run
    suite = ET.parse(write_reports(RunDir(run_dir), typed(result)).junit_xml).getroot()
    assert suite.tag == "testsuite" and suite.get("name") == "idempotency-invariants"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [i["name"] for i in result["invariants"]]
    assert {c.get("classname") for c in cases} == {"mixed"}
    failed = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    assert set(failed) == {"one_payment_per_order", "message_effects_once"}
    assert suite.get("tests") == str(len(result["invariants"])) and suite.get("failures") == "2"
    text = failed["one_payment_per_order"].text or ""
    assert "order ord_7f3a holds 2 payments" in text
    assert "2 violations" in failed["one_payment_per_order"].get("message", "")
    evidence_line = next(line for line in text.splitlines() if line.startswith("{"))
    evidence = json.loads(evidence_line)
    refs = {p["provider_ref"] for p in evidence["evidence"]["payments"]}
    assert refs == {"pr_api_1", "pr_hook_2"}


def test_passing_result_has_no_failures() -> None:
    result = base_result("duplicate_webhooks", 10)
    suite = ET.fromstring(junit_xml(result))
    assert len(suite.findall("testcase")) == len(result["invariants"])
    assert not suite.findall(".//failure")
    assert {c.get("classname") for c in suite.findall("testcase")} == {"duplicate_webhooks"}


def test_an_inconclusive_result_is_an_error_in_junit_not_green() -> None:
    result = base_result("mixed", 10)
    result.update(verdict="inconclusive", valid=False,
                  inconclusive_reasons=["path recovery_point was promised but exercised 0 times"])
    suite = ET.fromstring(junit_xml(result))
    (case,) = [c for c in suite.findall("testcase") if c.get("name") == "conclusive"]
    error = case.find("error")
    assert error is not None and "recovery_point" in error.get("message", "")
    assert suite.get("errors") == "1" and suite.get("failures") == "0"


def test_hostile_text_and_control_characters_stay_valid_xml(tmp_path: Path) -> None:
    result = base_result("mixed", 1)
    hostile = "<x a=\"1\">&amp;]]>\x00\x07\ud800 end"
    result["invariants"][1].update(passed=False, violation_count=60, violations=[
        {"invariant": "no_lost_acknowledgement", "order_id": hostile,
         "message": f"lost {hostile}",
         "evidence": {"operations": [{"op_id": str(i)} for i in range(40)]}}])
    path = tmp_path / "junit.xml"
    write_junit(path, result)
    failure = ET.parse(path).getroot().find(".//failure")
    assert failure is not None
    assert "lost <x a=\"1\">&amp;]]>" in (failure.text or "")
    assert "59 more" in (failure.text or "")
    assert "35 more" in (failure.text or "")  # evidence lists are trimmed to a few entries


def test_no_invariants_is_an_error_not_green() -> None:
    result = base_result("mixed", 0)
    result["invariants"] = []
    suite = ET.fromstring(junit_xml(result))
    assert suite.get("errors") == "1"
    assert suite.find(".//error") is not None
