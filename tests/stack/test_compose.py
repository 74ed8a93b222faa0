"""docker compose: there is no Docker engine here, so the compose file is read and
checked against what the harness needs, and the compose handle is driven through
a stand-in `docker` executable that records its arguments."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from harness.cli.main import main
from harness.errors import HarnessError
from harness.nemesis.toxiproxy_client import Nemesis
from harness.ports import free_port
from harness.run.runner import RunSpec
from harness.stack.compose import CONTAINER_RUN_DIR, PROJECT, ComposeLocust, read_layout, start_compose_stack
from harness.stack.info import StackInfo
from harness.stack.local import StackSettings, open_stack
from harness.toxiproxy.server import EmbeddedToxiproxy
from tests.support.stacks import sample_info

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def proxies() -> dict:
    return {p["name"]: p for p in json.loads((REPO / "compose" / "toxiproxy.json").read_text())}


def test_every_service_is_there_with_a_health_check(compose: dict) -> None:
    services = compose["services"]
    assert set(services) >= {"redis", "toxiproxy", "app", "consumer", "locust-master", "locust-worker"}
    for name, service in services.items():
        assert service.get("healthcheck", {}).get("test"), f"{name} has no health check"
    # scaled with `--scale locust-worker=N`, so no fixed container name
    assert "container_name" not in services["locust-worker"]


def test_redis_keeps_every_acknowledged_write(compose: dict) -> None:
    redis = compose["services"]["redis"]
    assert redis["image"].startswith("redis:7.")
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "always"


def test_toxiproxy_is_the_pinned_image_with_the_harness_proxies(compose: dict, proxies: dict) -> None:
    toxiproxy = compose["services"]["toxiproxy"]
    assert toxiproxy["image"] == "ghcr.io/shopify/toxiproxy:2.12.0"
    config_arg = next(arg for arg in toxiproxy["command"] if arg.startswith("-config="))
    mount = next(v for v in toxiproxy["volumes"] if v.split(":")[1] == config_arg.split("=", 1)[1])
    assert (REPO / mount.split(":")[0]).resolve() == REPO / "compose" / "toxiproxy.json"
    assert set(proxies) == {"app", "redis"}
    assert proxies["redis"]["upstream"] == "redis:6379"
    app_bind = compose["services"]["app"]["command"]
    app_port = app_bind[app_bind.index("--bind") + 1].rsplit(":", 1)[1]
    assert proxies["app"]["upstream"] == f"app:{app_port}"
    assert all(p["enabled"] for p in proxies.values())


def test_app_and_consumers_reach_redis_only_through_toxiproxy(compose: dict, proxies: dict) -> None:
    redis_listen_port = proxies["redis"]["listen"].rsplit(":", 1)[1]
    for name in ("app", "consumer"):
        env = compose["services"][name]["environment"]
        assert env["TARGET_APP_REDIS_URL"] == f"redis://toxiproxy:{redis_listen_port}/0"
        assert "TARGET_APP_UNSAFE_DISABLE" in env and "TARGET_APP_WEBHOOK_SECRET" in env
        assert compose["services"][name]["image"] == compose["services"]["app"]["image"]
    assert compose["services"]["app"]["build"] == "."
    for name in ("locust-master", "locust-worker"):
        command = compose["services"][name]["command"]
        assert "toxiproxy:8666" in " ".join(command) or "--worker" in command
        assert compose["services"][name]["environment"]["HARNESS_REDIS_URL"] == "redis://redis:6379/0"


def test_published_ports_are_what_the_harness_reads(compose: dict, proxies: dict) -> None:
    layout = read_layout(COMPOSE_FILE, environ={})
    app_proxy_port = int(proxies["app"]["listen"].rsplit(":", 1)[1])
    assert layout.app_url == f"http://127.0.0.1:{app_proxy_port}"
    assert layout.app_direct_url == "http://127.0.0.1:8000"
    assert layout.toxiproxy_url == "http://127.0.0.1:8474"
    assert layout.redis_url == "redis://127.0.0.1:6379/0"
    assert layout.webhook_secret == "dev-webhook-secret"
    assert read_layout(COMPOSE_FILE, environ={"TARGET_APP_WEBHOOK_SECRET": "s3"}).webhook_secret == "s3"
    for service in compose["services"].values():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{port} is published beyond loopback"


def test_dockerfile_entry_points_exist(compose: dict) -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "target_app.wsgi:app" in dockerfile
    commands = [compose["services"][name]["command"] for name in ("app", "consumer", "locust-master")]
    assert "target_app.wsgi:app" in commands[0]
    module = commands[1][commands[1].index("-m") + 1]
    assert importlib.util.find_spec(module) is not None
    assert importlib.util.find_spec("target_app.wsgi") is not None
    locustfile = commands[2][commands[2].index("-f") + 1]
    default = locustfile.split(":-", 1)[1].rstrip("}") if locustfile.startswith("${") else locustfile
    assert (REPO / default).is_file()
    for copied in ("target_app", "harness", "pyproject.toml"):
        assert f"COPY {copied}" in dockerfile and (REPO / copied).exists()


def stand_in_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> Path:
    """`docker` on PATH for this test is `script` (a template: `{python}` is this
    interpreter); it appends its arguments to the returned log (FAKE_DOCKER_LOG)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text(script.format(python=sys.executable))
    fake.chmod(0o755)
    log = tmp_path / "docker.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(log))
    return log


FAKE_DOCKER = """#!{python}
import json, os, sys
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "inspect":
    for name in sys.argv[4:]:
        state = "paused" if name.endswith("consumer-2") and os.path.exists(os.environ["FAKE_DOCKER_LOG"] + ".paused") else "running"
        print("/" + name + " " + state + " 0 healthy")
"""


def test_compose_stack_through_a_stand_in_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str],
                                                 embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    log = stand_in_docker(tmp_path, monkeypatch, FAKE_DOCKER)
    nemesis = Nemesis(embedded_toxiproxy.url)
    for name in ("app", "redis"):
        nemesis.ensure_proxy(name, f"127.0.0.1:{free_port()}", "127.0.0.1:9")
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    compose["services"]["toxiproxy"]["ports"] = [
        f"127.0.0.1:{embedded_toxiproxy.port}:8474", "127.0.0.1:18666:8666", "127.0.0.1:16380:6380"]
    file = tmp_path / "docker-compose.yml"
    file.write_text(yaml.safe_dump(compose))
    root = tmp_path / "h"
    stack = start_compose_stack(StackSettings(root=root, consumers=3, compose=True, compose_file=file,
                                              env={"TARGET_APP_UNSAFE_DISABLE": "inbox"}))
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    up = calls[0]
    assert up[:5] == ["compose", "-f", str(file), "-p", PROJECT]
    assert "up" in up and "--wait" in up and "consumer=3" in up
    info = stack.info
    written = json.loads((root / "state.json").read_text())
    assert StackInfo.from_json(written) == info and info.to_json() == written  # the compose writer, too
    assert info.compose_file == str(file) and info.supervisor_pid is None
    assert all(service.status is None for service in info.services)  # docker is asked instead
    assert info.mode == "compose" and info.toxiproxy_url == embedded_toxiproxy.url
    assert info.app_url == "http://127.0.0.1:18666" and info.unsafe_disable == ("inbox",)
    assert written["unsafe_disable"] == ["inbox"] and info.service_names[-1] == "consumer-3"
    attached = open_stack(root)
    assert attached is not None and type(attached).__name__ == "ComposeStack"
    assert attached.health() == {name: True for name in
                                 ("redis", "toxiproxy", "app", "consumer-1", "consumer-2", "consumer-3")}
    assert {row["restarts"] for row in attached.services()} == {0}  # docker's RestartCount
    assert main(["fault", "kill", "consumer-2", "--root", str(root)]) == 0
    assert main(["fault", "pause", "app", "--root", str(root)]) == 0
    assert main(["fault", "restart", "redis", "--root", str(root)]) == 0
    assert main(["fault", "kill", "consumer-9", "--root", str(root)]) == 2
    capsys.readouterr()
    Path(str(log) + ".paused").write_text("")
    assert main(["status", "--json", "--root", str(root)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["mode"] == "compose"
    assert {"kind": "process", "service": "consumer-2", "status": "paused"} in document["faults"]
    assert main(["down", "--root", str(root)]) == 0
    calls = [shlex.join(json.loads(line)) for line in log.read_text().splitlines()]
    assert f"kill --signal SIGKILL {PROJECT}-consumer-2" in calls
    assert f"pause {PROJECT}-app-1" in calls
    assert f"restart {PROJECT}-redis-1" in calls
    assert calls[-1].startswith(f"compose -f {file} -p {PROJECT} down")
    assert "--volumes" in calls[-1]  # the next stack must start with no earlier run's data
    assert open_stack(root) is None


FAKE_LOCUST_DOCKER = """#!{python}
# A stand-in docker for the compose Locust: `compose run` plays the master (records
# its environment, writes a history file where the bind mount would put it, exits 0),
# `inspect` says the master runs.
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
if args[0] == "inspect":
    print("true")
elif args[0] == "compose" and "run" in args:
    histories = os.path.join(os.environ["HARNESS_RUN_DIR"], "histories")
    with open(os.path.join(histories, "w1-1.jsonl"), "w") as history:
        history.write(json.dumps({{"seed": os.environ["HARNESS_SEED"], "uid": os.environ["HARNESS_UID"],
                                   "secret": os.environ["TARGET_APP_WEBHOOK_SECRET"],
                                   "locustfile": os.environ["LOCUSTFILE"]}}))
    time.sleep(0.5)
"""


def test_compose_locust_runs_the_master_then_the_workers_into_the_run_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compose: dict) -> None:
    log = stand_in_docker(tmp_path, monkeypatch, FAKE_LOCUST_DOCKER)
    state = sample_info(mode="compose", compose_file=str(COMPOSE_FILE), project=PROJECT, webhook_secret="s3cret")
    run_dir = tmp_path / "runs" / "r1"
    locust = ComposeLocust(info=state, scenario="mixed", users=12, spawn_rate=6.0, duration=4.2,
                           workers=3, run_dir=run_dir, seed=11)
    locust.start()
    assert locust.finished(timeout=30.0) and locust.returncode == 0
    locust.stop()
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    compose_calls = [call for call in calls if call[0] == "compose"]
    assert [call[:5] for call in compose_calls] == [["compose", "-f", str(COMPOSE_FILE), "-p", PROJECT]] * 3
    master, workers, remove = compose_calls
    # The master first (the workers resolve it by name), headless, waiting for every worker.
    assert calls.index(master) < calls.index(workers)
    service = master.index("locust-master")
    assert master[5:service][:2] == ["run", "--rm"] and "--use-aliases" in master
    command = master[service + 1:]
    assert command[:3] == ["locust", "-f", "harness/locustfiles/mixed.py"]
    for flag, value in (("--expect-workers", "3"), ("--users", "12"), ("--spawn-rate", "6"),
                        ("--run-time", "4s"), ("--host", "http://toxiproxy:8666"),
                        ("--csv", f"{CONTAINER_RUN_DIR}/locust/stats")):
        assert command[command.index(flag) + 1] == value, flag
    assert "--headless" in command and "--master" in command
    assert workers[5:] == ["up", "-d", "--no-deps", "--scale", "locust-worker=3", "locust-worker"]
    assert remove[5:] == ["rm", "--stop", "--force", "locust-worker"]
    # What the compose file interpolates reached the containers' side.
    recorded = json.loads((run_dir / "histories" / "w1-1.jsonl").read_text())
    assert recorded == {"seed": "11", "uid": str(__import__("os").getuid()), "secret": "s3cret",
                        "locustfile": "harness/locustfiles/mixed.py"}
    # And the compose file mounts the run directory where ComposeLocust writes into it.
    for name in ("locust-master", "locust-worker"):
        service_def = compose["services"][name]
        assert any(str(v).rsplit(":", 1) == ["${HARNESS_RUN_DIR:-./runs/compose}", CONTAINER_RUN_DIR]
                   for v in service_def["volumes"])
        assert service_def["environment"]["HARNESS_HISTORY_DIR"] == f"{CONTAINER_RUN_DIR}/histories"
        assert "${LOCUSTFILE" in " ".join(service_def["command"])


def test_scale_workers_needs_a_compose_stack(tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="needs --compose"):
        RunSpec(scenario="mixed", scale_workers=2).validate()
    RunSpec(scenario="mixed", scale_workers=2, compose=True).validate()
    with pytest.raises(HarnessError, match="compose stack"):
        ComposeLocust(info=sample_info(), scenario="mixed", users=1, spawn_rate=1, duration=1,
                      workers=2, run_dir=tmp_path, seed=0)
    from harness.cli.main import build_parser
    args = build_parser().parse_args(["run", "mixed", "--compose", "--scale-workers", "4"])
    from harness.cli.run_commands import _spec
    assert _spec(args, "mixed").scale_workers == 4
    assert _spec(build_parser().parse_args(["run", "mixed"]), "mixed").scale_workers == 0
