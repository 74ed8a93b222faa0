"""`service:` and `dependencies:` in the probe config: typed values, placeholders, and
errors that are one line naming the field (exit 2, no run directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli.main import main
from harness.probe.config import ProbeConfigError, load_config, parse_config
from harness.probe.service_config import DEFAULT_READY_TIMEOUT, ReadyCheck, render

ENDPOINTS = [{"path": "/payments", "body": {"amount": "{int:1-9}"}, "id": {"pointer": "/id"}}]
SERVICE = {"command": ["python", "app.py", "--port", "{port}"]}


def config(**top):
    return {"endpoints": ENDPOINTS, **top}


def test_service_and_dependencies_parse_into_typed_values() -> None:
    parsed = parse_config(config(
        service={"command": ["python", "app.py", "--port", "{port}", "--db", "postgresql://u@{dependency.db}/x", 7],
                 "env": {"REDIS_URL": "redis://{dependency.cache}/0", "WORKERS": 2}, "cwd": "/srv/app",
                 "ready": {"path": "/healthz", "timeout": "5s"}},
        dependencies={"db": "127.0.0.1:5432", "cache": "localhost:6379"}))
    service = parsed.service
    assert service is not None and parsed.upstream is None
    assert service.command[-1] == "7" and service.env["WORKERS"] == "2"
    assert service.cwd == Path("/srv/app")
    assert service.ready == ReadyCheck(path="/healthz", timeout=5.0)
    assert parsed.dependencies == {"db": "127.0.0.1:5432", "cache": "localhost:6379"}
    proxies = {"db": "127.0.0.1:40001", "cache": "127.0.0.1:40002"}
    assert service.argv(41000, proxies) == ["python", "app.py", "--port", "41000", "--db",
                                            "postgresql://u@127.0.0.1:40001/x", "7"]
    assert service.environment(41000, proxies) == {"REDIS_URL": "redis://127.0.0.1:40002/0", "WORKERS": "2"}


def test_placeholders_fill_host_and_port_apart_and_leave_other_braces_alone() -> None:
    deps = {"db": "127.0.0.1:40001"}
    assert render("{dependency.db.host} {dependency.db.port} {dependency.db}", 1, deps) == \
        "127.0.0.1 40001 127.0.0.1:40001"
    assert render('--json={"port": "{port}"} {other}', 8080, deps) == '--json={"port": "8080"} {other}'


def test_ready_may_be_a_path_or_left_out() -> None:
    assert parse_config(config(service={**SERVICE, "ready": "/up"})).service.ready == ReadyCheck("/up")
    default = parse_config(config(service=SERVICE)).service.ready
    assert default == ReadyCheck(path=None, timeout=DEFAULT_READY_TIMEOUT)  # its port accepting connections


def test_a_worker_is_ready_by_its_log_or_its_consumers_and_needs_no_port() -> None:
    messages = [{"name": "pay", "broker": "rabbitmq", "url": "amqp://guest:guest@127.0.0.1:5672/%2F",
                 "queue": "payments", "body": {"p": "{uuid}"}, "fact": "/p",
                 "effects": {"dsn": "postgresql://u@127.0.0.1/x", "query": "SELECT count(*) FROM t WHERE p = :fact"}}]
    for ready in ({"log": r"celery@\S+ ready", "timeout": "30s"}, {"consumers": 2}):
        parsed = parse_config({"service": {"command": ["worker"], "ready": ready}, "messages": messages})
        assert parsed.service is not None and not parsed.service.listens
        assert not parsed.service.ready.needs_port
        assert parse_config(parsed.to_dict()).service == parsed.service  # config.json reads back


def test_the_port_may_reach_the_service_through_its_environment() -> None:
    parsed = parse_config(config(service={"command": ["./run"], "env": {"PORT": "{port}"}}))
    assert parsed.service.environment(5000, {}) == {"PORT": "5000"}


def test_a_config_with_a_service_round_trips_through_its_plain_form() -> None:
    parsed = parse_config(config(service={**SERVICE, "env": {"A": "{dependency.db}"}, "cwd": "/tmp",
                                          "ready": "/h"}, dependencies={"db": "127.0.0.1:5432"}))
    again = parse_config(parsed.to_dict())
    assert again.service == parsed.service and again.dependencies == parsed.dependencies


def test_a_relative_cwd_is_relative_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "svc").mkdir()
    path = tmp_path / "probe.yaml"
    path.write_text("service: {command: [./app, '{port}'], cwd: svc}\n"
                    "endpoints: [{path: /p, body: {a: '{uuid}'}, id: {pointer: /id}}]\n")
    assert load_config(path).service.cwd == tmp_path / "svc"


@pytest.mark.parametrize("top, field", [
    ({"service": {"command": "python app.py {port}"}}, "service.command"),
    ({"service": {"command": []}}, "service.command"),
    ({"service": {"command": ["app", {"port": 1}]}}, "service.command[1]"),
    ({"service": {"command": ["app"]}}, "service.command"),  # never told {port}
    ({"service": {"command": ["app", "{port}", "{dependency.nope}"]}}, "service.command[2]"),
    ({"service": {**SERVICE, "env": {"1BAD": "x"}}}, "service.env.1BAD"),
    ({"service": {**SERVICE, "env": {"URL": {"a": 1}}}}, "service.env.URL"),
    ({"service": {**SERVICE, "env": {"URL": "{dependency.db}"}}}, "service.env.URL"),
    ({"service": {**SERVICE, "ready": "healthz"}}, "service.ready"),
    ({"service": {**SERVICE, "ready": {"path": "healthz"}}}, "service.ready.path"),
    ({"service": {**SERVICE, "ready": {"path": "/h", "timeout": "0s"}}}, "service.ready.timeout"),
    ({"service": {**SERVICE, "ready": {"path": "/h", "timeout": "soon"}}}, "service.ready.timeout"),
    ({"service": {**SERVICE, "ready": {"url": "/h"}}}, "service.ready"),
    ({"service": {**SERVICE, "cwd": ""}}, "service.cwd"),
    ({"service": {**SERVICE, "restart": True}}, "service"),
    ({"service": {"env": {}}}, "service"),
    ({"service": SERVICE, "upstream": "127.0.0.1:8000"}, "upstream"),
    ({"dependencies": {"db": "127.0.0.1:5432"}}, "dependencies"),
    ({"service": SERVICE, "dependencies": {"app": "127.0.0.1:5432"}}, "dependencies.app"),
    ({"service": SERVICE, "dependencies": {"dependencies": "127.0.0.1:5432"}}, "dependencies.dependencies"),
    ({"service": SERVICE, "dependencies": {"DB": "127.0.0.1:5432"}}, "dependencies.DB"),
    ({"service": SERVICE, "dependencies": {"db": "postgresql://127.0.0.1:5432/x"}}, "dependencies.db"),
    ({"service": SERVICE, "dependencies": {"db": "127.0.0.1:99999"}}, "dependencies.db"),
    ({"service": SERVICE, "dependencies": ["db"]}, "dependencies"),
    ({"service": {**SERVICE, "ready": {"path": "/h", "log": "up"}}}, "service.ready"),
    ({"service": {**SERVICE, "ready": {"log": "("}}}, "service.ready.log"),
    ({"service": {**SERVICE, "ready": {"log": ""}}}, "service.ready.log"),
    ({"service": {**SERVICE, "ready": {"consumers": 0}}}, "service.ready.consumers"),
    ({"service": {**SERVICE, "ready": {"consumers": True}}}, "service.ready.consumers"),
    # a worker's readiness without {port}, but the config sends it HTTP requests
    ({"service": {"command": ["worker"], "ready": {"log": "ready"}}}, "service.command"),
    # consumers are counted on RabbitMQ queues, and this config publishes to none
    ({"service": {**SERVICE, "ready": {"consumers": 1}}}, "service.ready.consumers"),
])
def test_every_service_error_is_one_line_naming_the_field(top: dict, field: str) -> None:
    with pytest.raises(ProbeConfigError) as caught:
        parse_config(config(**top), source="probe.yaml")
    message = str(caught.value)
    assert message.startswith(f"probe.yaml: {field}: "), message
    assert "\n" not in message


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "probe.yaml"
    path.write_text(text + "endpoints: [{path: /p, body: {a: '{uuid}'}, id: {pointer: /id}}]\n")
    return path


def test_the_cli_refuses_a_bad_service_with_one_line_and_no_run_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "service: {command: [./app, '{port}', '{dependency.db}']}\n")
    out = tmp_path / "run"
    assert main(["probe", "--config", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"harness: {path}: service.command[2]: {{dependency.db}} names no dependency")
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_upstream_beside_a_service_is_refused_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "service: {command: [./app, '{port}']}\n")
    out = tmp_path / "run"
    assert main(["probe", "--config", str(path), "--upstream", "127.0.0.1:9", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness: --upstream: not with `service:`") and len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("plan, field, words", [
    ("{at: 1s, for: 1s, proxy_down: db}", "windows[0].proxy_down", "proxy 'db' does not exist in a probe "
                                                                     "(its proxies: app, cache, dependencies)"),
    ("{at: 1s, for: 1s, process: {action: kill, service: app}}", "windows[0].process.service",
     "the probe cannot kill 'app'; the process it runs is called 'service'; a broker is a process target only "
     "when its `messages:` entry has `process:` (the probe owns it)"),
])
def test_the_cli_checks_a_plan_against_the_config_before_the_run_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], plan: str, field: str, words: str) -> None:
    path = _write(tmp_path, "service: {command: [./app, '{port}']}\ndependencies: {cache: '127.0.0.1:9'}\n")
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(f"seed: 1\nwindows:\n  - {plan}\n")
    out = tmp_path / "run"
    assert main(["probe", "--config", str(path), "--plan", str(plan_file), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"harness: {plan_file}: {field}: {words}", err
    assert not out.exists()
