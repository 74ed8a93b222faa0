"""The probe's config: YAML → typed values, and errors that name the field (exit 2)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.probe.config import (
    ProbeConfigError,
    load_config,
    mutate_body,
    parse_config,
    parse_upstream,
    render_body,
    simple_config,
)

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = {"endpoints": [{"path": "/payments", "body": {"amount": "{int:1-9}"}, "id": {"pointer": "/id"}}]}


def endpoint(**changes):
    return {"endpoints": [{**MINIMAL["endpoints"][0], **changes}]}


def test_minimal_config_gets_the_ietf_defaults() -> None:
    config = parse_config(MINIMAL)
    (only,) = config.endpoints
    assert (only.name, only.method, only.path, only.requires_key) == ("endpoint-0", "POST", "/payments", True)
    assert (only.expect.missing_key, only.expect.payload_mismatch, only.expect.in_flight) == (400, 422, 409)
    assert only.expect.created == (200, 201)
    assert config.key_header == "Idempotency-Key" and config.load.users == 8 and config.load.duration == 5.0


def test_conflict_profile_and_endpoint_overrides() -> None:
    config = parse_config({**endpoint(expect={"in_flight": 429, "created": 201}), "profile": "conflict-409"})
    assert config.endpoints[0].expect.payload_mismatch == 409
    assert config.endpoints[0].expect.in_flight == 429
    assert config.endpoints[0].expect.created == (201,)


def test_full_config_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "probe.yaml"
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "x.yaml").write_text("seed: 1\n")
    path.write_text(
        "upstream: 127.0.0.1:8000\nheaders: {Authorization: Bearer t, X-Tenant-ID: t1}\n"
        "endpoints:\n  - name: pay\n    method: put\n    path: /p\n    body: {a: '{uuid}', b: 1}\n"
        "    id: {header: Location}\n    read: {path: '/p/{id}', expect: [200, 202]}\n"
        "    search: {path: '/p?k={key}', items: /items}\n"
        "load: {users: 3, duration: 2s, client_timeout: 500ms, mix: {double_click: 1}}\nplan: plans/x.yaml\n")
    config = load_config(path)
    assert config.upstream == "127.0.0.1:8000"
    assert config.headers == {"Authorization": "Bearer t", "X-Tenant-ID": "t1"}
    (pay,) = config.endpoints
    assert pay.method == "PUT" and pay.id.header == "Location" and pay.read.expect == (200, 202)
    assert pay.search.items == "/items"
    assert config.load.client_timeout == 0.5 and config.load.mix["double_click"] == 1.0
    assert config.plan == tmp_path / "plans/x.yaml"  # relative to the file
    again = parse_config(config.to_dict())
    assert again.endpoints == config.endpoints and again.load == config.load


@pytest.mark.parametrize("raw, field", [
    ({"endpoints": []}, "endpoints"),
    ({"endpoints": [{"path": "/p", "body": {}, "id": {"pointer": "/id"}}]}, "endpoints[0].body"),
    (endpoint(id={"pointer": "id"}), "endpoints[0].id.pointer"),
    (endpoint(id={"pointer": "/id", "header": "Location"}), "endpoints[0].id"),
    (endpoint(path="payments"), "endpoints[0].path"),
    (endpoint(method="GET"), "endpoints[0].method"),
    (endpoint(mutate="nope"), "endpoints[0].mutate"),
    (endpoint(expect={"payload_mismatch": 200}), "endpoints[0].expect.payload_mismatch"),
    (endpoint(read={"path": "/p"}), "endpoints[0].read.path"),
    (endpoint(colour="red"), "endpoints[0]"),
    ({**MINIMAL, "profile": "stripe"}, "profile"),
    ({**MINIMAL, "upstream": "http://x:1/"}, "upstream"),
    ({**MINIMAL, "load": {"users": 0}}, "load.users"),
    ({**MINIMAL, "load": {"mix": {"replay": 2}}}, "load.mix.replay"),
    ({**MINIMAL, "headers": {"Bad Header": "x"}}, "headers.Bad Header"),
])
def test_errors_name_the_field(raw, field) -> None:
    with pytest.raises(ProbeConfigError) as error:
        parse_config(raw, source="probe.yaml")
    assert str(error.value).startswith(f"probe.yaml: {field}: "), str(error.value)


def test_upstream_must_be_host_port() -> None:
    assert parse_upstream("127.0.0.1:8000") == "127.0.0.1:8000"
    for bad in ("127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999", "a b:1"):
        with pytest.raises(ProbeConfigError):
            parse_upstream(bad)


def test_body_templates_generate_typed_fresh_values() -> None:
    rng = random.Random(1)
    template = {"n": "{int:5-7}", "id": "{uuid}", "k": "{key}", "c": "{choice:a|b}", "ref": "order-{uuid}",
                "nested": [{"x": "{int:1-1}"}], "fixed": "EUR"}
    one, two = render_body(template, rng, key="k1"), render_body(template, rng, key="k2")
    assert 5 <= one["n"] <= 7 and isinstance(one["n"], int)
    assert one["id"] != two["id"] and len(one["id"]) == 36
    assert (one["k"], two["k"]) == ("k1", "k2") and one["c"] in ("a", "b")
    assert one["ref"].startswith("order-") and one["nested"] == [{"x": 1}] and one["fixed"] == "EUR"


def test_mutated_body_differs_in_one_field() -> None:
    config = parse_config(endpoint(body={"amount": "{int:1-9}", "currency": "EUR"}))
    body = {"amount": 4, "currency": "EUR"}
    assert mutate_body(config.endpoints[0].body, body, config.endpoints[0], random.Random(0)) == \
        {"amount": 5, "currency": "EUR"}
    chosen = parse_config(endpoint(body={"amount": "{int:1-9}", "currency": "EUR"}, mutate="currency"))
    assert mutate_body(chosen.endpoints[0].body, body, chosen.endpoints[0], random.Random(0))["currency"] == "EUR-x"


def test_simple_config_from_flags() -> None:
    config = simple_config(upstream="127.0.0.1:9", path="/p", body={"a": "{uuid}"}, read_path="/p/{id}",
                           profile="conflict-409", headers={"Authorization": "x"})
    assert config.endpoints[0].read.path == "/p/{id}" and config.endpoints[0].expect.payload_mismatch == 409


def test_cli_exits_2_with_one_line_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "probe.yaml"
    path.write_text("endpoints:\n  - {path: /p, body: {a: '{uuid}'}, id: {pointer: id}}\n")
    assert main(["probe", "--config", str(path), "--upstream", "127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"harness: {path}: endpoints[0].id.pointer: must be a JSON pointer")
    assert len(err.strip().splitlines()) == 1
    assert main(["probe", "--path", "/p", "--body", "{}"]) == 2
    assert "--upstream, --path and --body are required" in capsys.readouterr().err


def test_process_faults_and_foreign_proxies_are_refused(tmp_path: Path) -> None:
    from harness.nemesis.plans import PlanError, parse_plan
    from harness.probe.runner import plan_windows

    kill = parse_plan({"seed": 1, "windows": [{"at": "1s", "for": "1s",
                                                "process": {"action": "kill", "service": "app"}}]})
    with pytest.raises(PlanError, match="cannot kill"):
        plan_windows(kill, 5, "app")
    redis = parse_plan({"seed": 1, "windows": [{"at": "1s", "for": "1s", "proxy_down": "redis"}]})
    with pytest.raises(PlanError, match="proxy 'redis' does not exist"):
        plan_windows(redis, 5, "app")
    probe_plan = parse_plan(__import__("yaml").safe_load((ROOT / "harness/plans/probe.yaml").read_text()))
    windows = plan_windows(probe_plan, 10, "probe_1_ab")
    assert windows and {w.fault.proxy for w in windows} == {"probe_1_ab"}


def test_a_run_directory_is_never_reused(tmp_path: Path) -> None:
    from harness.probe.runner import ProbeError, ProbeSpec, run_probe

    (tmp_path / "history").mkdir()
    config = parse_config({**MINIMAL, "upstream": "127.0.0.1:9"})
    with pytest.raises(ProbeError, match="already holds a probe run"):
        run_probe(ProbeSpec(config=config, out_dir=tmp_path))


def test_an_unreachable_upstream_is_a_harness_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.ports import free_port

    upstream = f"127.0.0.1:{free_port()}"
    code = main(["probe", "--upstream", upstream, "--path", "/p", "--body", '{"a": "{uuid}"}',
                 "--out", str(tmp_path / "run")])
    assert code == 2
    assert f"upstream {upstream} does not accept connections" in capsys.readouterr().err


def test_a_plan_named_in_the_config_is_a_bundled_plan_or_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "probe.yaml"
    endpoints = "endpoints:\n  - {name: pay, method: post, path: /p, body: {a: '{uuid}'}, id: {header: Location}}\n"
    path.write_text(endpoints + "plan: probe\n")
    assert load_config(path).plan == ROOT / "harness" / "plans" / "probe.yaml"
    path.write_text(endpoints + "plan: nowhere\n")
    with pytest.raises(ProbeConfigError, match=r"plan: no bundled plan 'nowhere': choose one of .*probe"):
        load_config(path)


def test_written_codes_and_strict_survive_the_round_trip() -> None:
    config = parse_config({**endpoint(expect={"missing_key": 400, "created": 201}), "strict": True})
    (only,) = config.endpoints
    assert only.expect.written == ("missing_key",) and config.strict
    # The Locust processes and the plugin read the config back: a profile's code must not
    # come back as one the user wrote.
    again = parse_config(config.to_dict())
    assert again.endpoints == config.endpoints and again.strict
    assert parse_config(MINIMAL).endpoints[0].expect.written == () and not parse_config(MINIMAL).strict
    with pytest.raises(ProbeConfigError, match="strict: must be true or false"):
        parse_config({**MINIMAL, "strict": "yes"}, source="probe.yaml")
