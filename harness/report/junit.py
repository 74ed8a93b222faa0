"""junit.xml: one test case per invariant, so CI shows which invariant broke.

The probe's advice (what a service may improve but did not break: a SHOULD of the
draft it misses) is a property `advice.<rule>` each and the suite's system-out, never
a failure: CI stays green for a correct service.

A run's typed check result (`write_check_junit`) and a result document read as
JSON (`write_junit`, the probe's) become the same `Suite`, written one way.

Built with ElementTree (which escapes markup); characters XML 1.0 cannot carry
at all (most control characters) are replaced first, because evidence holds
whatever a client or server sent.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from harness.check.checker import CheckResult
from harness.report.html import plural

SUITE_NAME = "idempotency-invariants"
EVIDENCE_IN_FAILURE = 3

_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: Any) -> str:
    return _NOT_XML.sub("\ufffd", str(text))


@dataclass(frozen=True)
class Case:
    """One invariant as a junit test case: passed, or failed with a count and a text."""

    name: str
    passed: bool
    violation_count: int = 0
    text: str = ""


@dataclass(frozen=True)
class Suite:
    """What junit.xml shows of a check: the run, its cases and why it is inconclusive."""

    run_id: str
    scenario: str
    unsafe_disable: tuple[str, ...]
    cases: tuple[Case, ...]
    inconclusive: bool = False
    inconclusive_reasons: tuple[str, ...] = ()
    advice: tuple[tuple[str, str, str], ...] = ()  # (rule, level, message), the probe's


def verdict_of(result: Mapping[str, Any]) -> str:
    """pass | fail | inconclusive of a result document; one written before verdicts
    existed has only `valid`."""
    verdict = result.get("verdict")
    if verdict in ("pass", "fail", "inconclusive"):
        return str(verdict)
    return "pass" if result.get("valid") else "fail"


def suite_of_check(result: CheckResult) -> Suite:
    """The junit suite of a check result, from its typed fields."""
    cases = tuple(
        Case(inv.name, inv.passed, inv.violation_count,
             "" if inv.passed else _failure_text([v.to_dict() for v in inv.violations], inv.violation_count))
        for inv in result.invariants)
    return Suite(result.run_id, result.scenario, tuple(result.unsafe_disable), cases,
                 result.verdict == "inconclusive", tuple(result.inconclusive_reasons))


def suite_of_document(result: Mapping[str, Any]) -> Suite:
    """The junit suite of a result document read as JSON (the probe's result.json)."""
    cases = []
    for inv in result.get("invariants") or []:
        violations = list(inv.get("violations") or [])
        count = inv.get("violation_count", len(violations))
        count = count if isinstance(count, int) else len(violations)
        passed = bool(inv.get("passed", False))
        cases.append(Case(str(inv.get("name") or "unnamed"), passed, count,
                          "" if passed else _failure_text(violations, count)))
    return Suite(str(result.get("run_id") or ""), str(result.get("scenario") or ""),
                 tuple(map(str, result.get("unsafe_disable") or [])), tuple(cases),
                 verdict_of(result) == "inconclusive",
                 tuple(str(reason) for reason in result.get("inconclusive_reasons") or []),
                 tuple((str(item.get("rule")), str(item.get("level")), str(item.get("message")))
                       for item in result.get("advice") or [] if isinstance(item, Mapping)))


def junit_xml(result: CheckResult | Mapping[str, Any]) -> str:
    """The junit document for a check result (typed, or a result document)."""
    suite_of = suite_of_check(result) if isinstance(result, CheckResult) else suite_of_document(result)
    return suite_xml(suite_of)


def suite_xml(data: Suite) -> str:
    failed = [case for case in data.cases if not case.passed]
    scenario = xml_safe(data.scenario or "unknown")
    suite = ET.Element("testsuite", {
        "name": SUITE_NAME,
        "tests": str(len(data.cases)),
        "failures": str(len(failed)),
        "errors": "0",
        "skipped": "0",
        "time": "0",
    })
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", {"name": "run_id", "value": xml_safe(data.run_id)})
    ET.SubElement(properties, "property", {"name": "scenario", "value": xml_safe(data.scenario)})
    ET.SubElement(properties, "property", {"name": "unsafe_disable", "value": xml_safe(",".join(data.unsafe_disable))})
    for rule, level, message in data.advice:
        ET.SubElement(properties, "property", {"name": xml_safe(f"advice.{rule}"),
                                               "value": xml_safe(f"{level}: {message}")})
    for item in data.cases:
        name = xml_safe(item.name or "unnamed")
        case = ET.SubElement(suite, "testcase", {"name": name, "classname": scenario, "time": "0"})
        if item.passed:
            continue
        count = item.violation_count
        failure = ET.SubElement(case, "failure", {
            "type": "InvariantViolation",
            "message": xml_safe(f"{name}: {plural(count, 'violation')}"),
        })
        failure.text = xml_safe(item.text)
    if data.inconclusive:
        # Nothing failed, but the run did not prove what it promised: a CI tool must
        # not read that as green.
        case = ET.SubElement(suite, "testcase", {"name": "conclusive", "classname": scenario})
        ET.SubElement(case, "error", {"type": "Inconclusive",
                                      "message": xml_safe("; ".join(data.inconclusive_reasons) or "inconclusive")})
        suite.set("errors", str(int(suite.get("errors", "0")) + 1))
        suite.set("tests", str(int(suite.get("tests", "0")) + 1))
    if not data.cases:
        # An empty suite reads as green in most CI tools; a result without
        # invariants is a broken check, so say so with an error.
        case = ET.SubElement(suite, "testcase", {"name": "check", "classname": scenario})
        ET.SubElement(case, "error", {"message": "the result lists no invariants"})
        suite.set("errors", "1")
        suite.set("tests", "1")
    if data.advice:
        out = ET.SubElement(suite, "system-out")
        out.text = xml_safe("".join(f"advice: {rule} ({level}): {message}\n" for rule, level, message in data.advice))
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=False)


def write_junit(path: Path, result: Mapping[str, Any]) -> None:
    """junit.xml of a result document (the probe's)."""
    _write(path, suite_xml(suite_of_document(result)))


def write_check_junit(path: Path, result: CheckResult) -> None:
    """junit.xml of a run's check result."""
    _write(path, suite_xml(suite_of_check(result)))


def _write(path: Path, xml: str) -> None:
    document = '<?xml version="1.0" encoding="UTF-8"?>\n' + xml + "\n"
    partial = Path(path).with_name(Path(path).name + ".partial")
    partial.write_text(document, encoding="utf-8")
    partial.replace(path)


def _failure_text(violations: Sequence[Mapping[str, Any]], total: int) -> str:
    lines = [str(v.get("message") or "violation") for v in violations]
    if total > len(violations):
        lines.append(f"... and {total - len(violations)} more")
    lines.append("")
    lines.append(f"evidence (first {min(EVIDENCE_IN_FAILURE, len(violations))}):")
    for violation in violations[:EVIDENCE_IN_FAILURE]:
        lines.append(_compact(_trimmed(violation)))
    return "\n".join(lines)


def _trimmed(violation: Mapping[str, Any], keep: int = 5) -> Any:
    """The violation with each evidence list cut to its first `keep` entries."""
    if not isinstance(violation, Mapping) or not isinstance(violation.get("evidence"), Mapping):
        return violation
    evidence = {}
    for key, value in violation["evidence"].items():
        if isinstance(value, list) and len(value) > keep:
            value = [*value[:keep], f"... {len(value) - keep} more"]
        evidence[key] = value
    return {**violation, "evidence": evidence}


def _compact(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return repr(value)
