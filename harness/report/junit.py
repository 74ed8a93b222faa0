"""junit.xml: one test case per invariant, so CI shows which invariant broke.

Built with ElementTree (which escapes markup); characters XML 1.0 cannot carry
at all (most control characters) are replaced first, because evidence holds
whatever a client or server sent.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

SUITE_NAME = "idempotency-invariants"
EVIDENCE_IN_FAILURE = 3

_NOT_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: Any) -> str:
    return _NOT_XML.sub("\ufffd", str(text))


def verdict_of(result: Mapping[str, Any]) -> str:
    """pass | fail | inconclusive; results written before verdicts existed have only `valid`."""
    verdict = result.get("verdict")
    if verdict in ("pass", "fail", "inconclusive"):
        return str(verdict)
    return "pass" if result.get("valid") else "fail"


def junit_xml(result: Mapping[str, Any]) -> str:
    """The junit document for a check result."""
    invariants = list(result.get("invariants") or [])
    failed = [inv for inv in invariants if not inv.get("passed", False)]
    scenario = xml_safe(result.get("scenario") or "unknown")
    suite = ET.Element("testsuite", {
        "name": SUITE_NAME,
        "tests": str(len(invariants)),
        "failures": str(len(failed)),
        "errors": "0",
        "skipped": "0",
        "time": "0",
    })
    properties = ET.SubElement(suite, "properties")
    for key in ("run_id", "scenario"):
        ET.SubElement(properties, "property",
                      {"name": key, "value": xml_safe(result.get(key) or "")})
    ET.SubElement(properties, "property", {
        "name": "unsafe_disable",
        "value": xml_safe(",".join(map(str, result.get("unsafe_disable") or []))),
    })
    for inv in invariants:
        name = xml_safe(inv.get("name") or "unnamed")
        case = ET.SubElement(suite, "testcase", {"name": name, "classname": scenario, "time": "0"})
        if inv.get("passed", False):
            continue
        count = inv.get("violation_count", len(inv.get("violations") or []))
        failure = ET.SubElement(case, "failure", {
            "type": "InvariantViolation",
            "message": xml_safe(f"{name}: {count} violation{'' if count == 1 else 's'}"),
        })
        failure.text = xml_safe(_failure_text(inv))
    reasons = [str(reason) for reason in result.get("inconclusive_reasons") or []]
    if verdict_of(result) == "inconclusive":
        # Nothing failed, but the run did not prove what it promised: a CI tool must
        # not read that as green.
        case = ET.SubElement(suite, "testcase", {"name": "conclusive", "classname": scenario})
        ET.SubElement(case, "error", {"type": "Inconclusive",
                                      "message": xml_safe("; ".join(reasons) or "inconclusive")})
        suite.set("errors", str(int(suite.get("errors", "0")) + 1))
        suite.set("tests", str(int(suite.get("tests", "0")) + 1))
    if not invariants:
        # An empty suite reads as green in most CI tools; a result without
        # invariants is a broken check, so say so with an error.
        case = ET.SubElement(suite, "testcase", {"name": "check", "classname": scenario})
        ET.SubElement(case, "error", {"message": "the result lists no invariants"})
        suite.set("errors", "1")
        suite.set("tests", "1")
    ET.indent(suite)
    return ET.tostring(suite, encoding="unicode", xml_declaration=False)


def write_junit(path: Path, result: Mapping[str, Any]) -> None:
    document = '<?xml version="1.0" encoding="UTF-8"?>\n' + junit_xml(result) + "\n"
    partial = Path(path).with_name(Path(path).name + ".partial")
    partial.write_text(document, encoding="utf-8")
    partial.replace(path)


def _failure_text(inv: Mapping[str, Any]) -> str:
    violations = list(inv.get("violations") or [])
    lines = [str(v.get("message") or "violation") for v in violations]
    total = inv.get("violation_count", len(violations))
    if isinstance(total, int) and total > len(violations):
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
