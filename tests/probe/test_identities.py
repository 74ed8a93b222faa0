"""Identities: the `identities:` config, the headers each identity sends, and
`identities_isolated` on hand-built histories (answers and read-backs), including the
rule that one key of two identities is two keys to the answer invariants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.cli.main import main
from harness.probe.checker import check
from harness.probe.config import ProbeConfigError, parse_config
from harness.probe.identities import READ_AS_OTHER, other_identity, owners, request_headers

ALICE, BOB = {"Authorization": "Bearer alice"}, {"Authorization": "Bearer bob"}
ENDPOINT = {"name": "pay", "path": "/p", "body": {"a": "{int:1-9}"}, "id": {"pointer": "/id"},
            "read": {"path": "/p/{id}"}, "headers": {"X-Endpoint": "1"}}
CONFIG = parse_config({"headers": {"X-Tenant": "t1"}, "identities": [ALICE, BOB], "endpoints": [ENDPOINT]})


def op(key: str | None, identity: int | None, kind: str = "first", type: str = "ok", *, rid: str | None = None,
       status: int | None = None, at: float = 1.0) -> dict[str, Any]:
    return {"op": "create_order", "op_id": f"{key}-{identity}-{kind}-{rid}", "type": type, "endpoint": "pay",
            "idempotency_key": key, "identity": identity, "expect": kind, "fingerprint": "f1",
            "status": status or {"ok": 201, "fail": 409, "info": None}[type],
            "resource_id": rid if type == "ok" else None, "body_digest": f"d-{rid}", "complete_time": at}


def read_as_other(rid: str, status: int, *, owner: int = 0, identity: int = 1) -> dict[str, Any]:
    return {"op": "read_order", "type": "ok" if status < 300 else "fail", "endpoint": "pay",
            "read": READ_AS_OTHER, "resource_id": rid, "status": status, "owner": owner, "identity": identity}


def isolated(result) -> Any:
    return next(inv for inv in result.invariants if inv.name == "identities_isolated")


@pytest.mark.parametrize(("raw", "message"), [
    ({"Authorization": "Bearer alice"}, "identities: must be a list of at least two header maps"),
    ([ALICE], "identities: must be a list of at least two header maps"),
    ([ALICE, {}], "identities[1]: must name at least one header"),
    ([ALICE, ALICE], "identities[1]: is the same as an earlier identity"),
    ([ALICE, {"Bad Header": "x"}], "identities[1].Bad Header: must be an HTTP header name"),
    ([ALICE, ["x"]], "identities[1]: must be a mapping"),
])
def test_identity_errors_name_the_field(raw: Any, message: str) -> None:
    with pytest.raises(ProbeConfigError) as error:
        parse_config({"identities": raw, "endpoints": [ENDPOINT]}, source="p.yaml")
    assert str(error.value).startswith(f"p.yaml: {message}")
    assert "\n" not in str(error.value)


def test_cli_refuses_a_bad_identity_in_one_line_without_a_run_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "probe.yaml"
    path.write_text("identities: [{Authorization: Bearer alice}]\n"
                    "endpoints:\n  - {path: /p, body: {a: '{uuid}'}, id: {pointer: /id}}\n")
    out = tmp_path / "run"
    assert main(["probe", "--config", str(path), "--upstream", "127.0.0.1:9", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"harness: {path}: identities: must be a list") and len(err.splitlines()) == 1
    assert not out.exists()


def test_identities_round_trip_and_give_each_request_its_headers() -> None:
    again = parse_config(CONFIG.to_dict())
    assert again.identities == CONFIG.identities and again.to_dict() == CONFIG.to_dict()
    endpoint = CONFIG.endpoints[0]
    assert request_headers(CONFIG, endpoint, 1) == {"X-Tenant": "t1", "X-Endpoint": "1", **BOB}
    assert request_headers(CONFIG, endpoint, None) == {"X-Tenant": "t1", "X-Endpoint": "1"}
    assert [other_identity(CONFIG, i) for i in (0, 1, None)] == [1, 0, 1]
    single = parse_config({"endpoints": [ENDPOINT]})
    assert other_identity(single, 0) is None and "identities" not in single.to_dict()


def test_a_key_of_two_identities_is_two_keys() -> None:
    # Correctly scoped: Bob's reuse of Alice's key makes Bob's own payment.
    ops = [op("k1", 0, rid="a1"), op("k1", 1, "other_identity", rid="b1"), op("k1", 0, "replay", rid="a1"),
           op("k2", 1, rid="b2"), op("k2", 0, "other_identity_concurrent", rid="a2")]
    reads = [read_as_other("a1", 404), read_as_other("b2", 404, owner=1, identity=0)]
    result = check(ops, CONFIG, reads=reads, min_acknowledged=1)
    assert result.verdict == "pass", result.violations
    assert isolated(result).checked == 4  # two cross-identity answers, two reads as another identity


def test_a_replay_of_another_identitys_answer_is_a_leak() -> None:
    ops = [op("k1", 0, rid="a1", at=1.0), op("k1", 1, "other_identity", rid="a1", at=2.0)]
    result = check(ops, CONFIG, min_acknowledged=1)
    violation = isolated(result).violations[0]
    assert not isolated(result).passed
    assert "resource 'a1' was given to identities 0, 1" in violation["message"]
    assert {answer["identity"] for answer in violation["evidence"]["answers"]} == {0, 1}
    # Each identity's own answers agree with each other: only the isolation rule sees it.
    assert {inv.name for inv in result.invariants if not inv.passed} == {"identities_isolated"}
    assert owners(ops) == {("pay", "a1"): 0}


def test_a_read_back_by_another_identity_is_a_leak_and_a_failed_read_proves_nothing() -> None:
    ops = [op("k1", 0, rid="a1")]
    leaked = check(ops, CONFIG, reads=[read_as_other("a1", 200)], min_acknowledged=1)
    assert "identity 1 read resource 'a1' of identity 0 with 200" in isolated(leaked).violations[0]["message"]
    unknown = check(ops, CONFIG, reads=[{**read_as_other("a1", 503), "type": "info"}], min_acknowledged=1)
    assert isolated(unknown).passed and isolated(unknown).checked == 0


def test_without_identities_the_invariant_is_not_judged() -> None:
    plain = parse_config({"endpoints": [ENDPOINT]})
    result = check([op("k1", None, rid="a1")], plain, min_acknowledged=1)
    assert "identities_isolated" not in {inv.name for inv in result.invariants}



def test_the_report_names_the_identities_and_the_effect_queries() -> None:
    from harness.probe.report import render_report

    html = render_report({"verdict": "pass", "counts": {"effect_queries": 3}, "identities": 2, "endpoints": []})
    assert "<th>identities</th><td class=''>2</td>" in html and "<th>effect queries</th><td class=''>3</td>" in html
    plain = render_report({"verdict": "pass", "counts": {}, "endpoints": []})
    assert "<th>identities</th><td class=''>one</td>" in plain and "none (no effects:)" in plain
