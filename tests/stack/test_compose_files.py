"""The compose path the GitHub workflow runs, checked by reading its files (there is
no Docker engine here): docker-compose.yml, Dockerfile, .dockerignore and the
workflow must agree with each other and with what the harness and the app read.
Each test names the breakage it guards against."""

from __future__ import annotations

import ast
import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.stack.compose import PROJECT

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
# Set by this file's topology, not forwarded from the caller (see docker-compose.yml).
NOT_FORWARDED = {"TARGET_APP_REDIS_URL", "TARGET_APP_CONSUMER_NAME", "TARGET_APP_CRASH_POINTS_DIR"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_the_compose_file_is_valid_against_the_compose_specification(compose: dict) -> None:
    # What `docker compose config` would refuse (a misspelt key, a wrong value type or
    # enum) without a Docker engine; tests/data/README.md says where the schema is from.
    import jsonschema

    schema = json.loads((ROOT / "tests" / "data" / "compose-spec.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'/'.join(map(str, error.path))}: {error.message}" for error in validator.iter_errors(compose)]
    assert not errors, errors
    # The validator does refuse: a typo in a health check key.
    broken = {**compose, "services": {**compose["services"], "app": {**compose["services"]["app"], "healthchek": {}}}}
    assert list(validator.iter_errors(broken))


def settings_read_by_the_app() -> set[str]:
    """Every TARGET_APP_* name `Settings.from_env` reads, from its source: a setting
    added there and not to the compose file fails the test below."""
    source = (ROOT / "target_app" / "settings.py").read_text()
    tree = ast.parse(source)
    from_env = next(node for node in ast.walk(tree)
                    if isinstance(node, ast.FunctionDef) and node.name == "from_env")
    names = {node.value for node in ast.walk(from_env)
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and node.value.startswith("TARGET_APP_")}
    assert len(names) >= 15, f"only {sorted(names)} found; did Settings.from_env change shape?"
    return names


def test_the_compose_project_is_the_one_the_harness_uses(compose: dict) -> None:
    # Without it `docker compose build`/`down` act on a project named after the folder.
    assert compose["name"] == PROJECT == "idempotency-harness"


def test_every_setting_the_app_reads_is_forwarded_to_app_and_consumers(compose: dict) -> None:
    wanted = settings_read_by_the_app()
    for service in ("app", "consumer"):
        env = compose["services"][service]["environment"]
        missing = wanted - set(env)
        assert not missing, f"{service} does not get {sorted(missing)}"
        for name in wanted - NOT_FORWARDED:
            # `${NAME:-default}` (or `${NAME}`): the caller's value reaches the container.
            assert re.fullmatch(r"\$\{" + name + r"(:?-[^}]*)?\}", str(env[name])), \
                f"{service}: {name}={env[name]!r} is not forwarded from the caller"
        assert env["TARGET_APP_REDIS_URL"].startswith("redis://toxiproxy:")
        assert env["TARGET_APP_CONSUMER_NAME"] == ""  # replicas name themselves
    # The values the smoke job sets must not be dropped (the bug this test was written for).
    assert {"TARGET_APP_HANDLER_DELAY_MS", "TARGET_APP_RECLAIM_IDLE_MS", "TARGET_APP_INTERNAL_TOKEN"} <= wanted


def test_one_image_is_built_once_and_reused(compose: dict) -> None:
    services = compose["services"]
    built = [name for name, service in services.items() if "build" in service]
    assert built == ["app"], f"built by {built}; one build, the others reuse its image"
    image = services["app"]["image"]
    assert ":" in image and not image.endswith(":latest")
    for name in ("consumer", "locust-master", "locust-worker"):
        assert services[name]["image"] == image, name
        # Never pulled: the image exists only where `build` made it.
        assert services[name]["pull_policy"] == "never", name


def _digest_or_exact_tag(image: str) -> bool:
    if re.search(r"@sha256:[0-9a-f]{64}$", image):
        return True
    tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else ""
    # 7.4.2 or 2.12.0, optionally with a variant: not 7, latest or 3.11-slim.
    return bool(re.fullmatch(r"\d+\.\d+\.\d+(-[a-z0-9.-]+)?", tag))


def test_pulled_images_are_pinned(compose: dict) -> None:
    image = compose["services"]["app"]["image"]
    for name, service in compose["services"].items():
        if service["image"] != image:
            assert _digest_or_exact_tag(service["image"]), f"{name}: {service['image']} moves"
    assert _digest_or_exact_tag("redis:7.4.2") and not _digest_or_exact_tag("redis:7")
    assert not _digest_or_exact_tag("python:3.11-slim")


def test_the_dockerfile_base_is_pinned_and_dependencies_come_before_the_code() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    froms = [line.split()[1] for line in lines if line.startswith("FROM ")]
    assert froms and all(_digest_or_exact_tag(base) for base in froms), froms
    copies = [(i, line) for i, line in enumerate(lines) if line.startswith("COPY ")]
    installs = [i for i, line in enumerate(lines) if line.startswith("RUN") and "pip install" in line
                or line.startswith("&& pip install")]
    pyproject = next(i for i, line in copies if "pyproject.toml" in line)
    code = min(i for i, line in copies if any(f" {d}" in line for d in ("target_app", "harness")))
    assert installs and pyproject < min(installs) < code, \
        "COPY pyproject.toml, install the dependencies, then COPY the code (layer caching)"
    assert not any(line.startswith("COPY . ") for line in lines)
    user = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert user and user[-1] not in ("root", "0")


def _ignored(patterns: list[str], path: str) -> bool:
    """Docker's rule for .dockerignore, enough for these patterns: the last matching
    line wins, `!` re-includes, a directory's pattern covers what is under it."""
    ignored = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        pattern = pattern.strip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
        candidates = prefixes
        if pattern.startswith("**/"):
            tail = pattern[3:]
            candidates = ["/".join(parts[i:n]) for n in range(1, len(parts) + 1) for i in range(n)]
            pattern = tail
        if any(fnmatch.fnmatchcase(candidate, pattern) for candidate in candidates):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_the_venv_runs_and_secrets_out_but_not_what_the_image_copies() -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    for path in (".venv/bin/python", "runs/20260101-mixed/histories/w1.jsonl", ".harness/state.json",
                 ".git/HEAD", "harness/__pycache__/cli.cpython-311.pyc", ".pytest_cache/v/cache",
                 "benchmarks/results/checker.json"):
        assert _ignored(patterns, path), f"{path} would be sent to the Docker daemon"
    copied = [line.split()[1] for line in (ROOT / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ")]
    assert copied
    for source in copied:
        for file in ([ROOT / source] if (ROOT / source).is_file() else (ROOT / source).rglob("*.py")):
            relative = file.relative_to(ROOT).as_posix()
            assert not _ignored(patterns, relative), f"the Dockerfile copies {relative}, .dockerignore drops it"
    # The matcher itself can say no.
    assert not _ignored(["runs/"], "harness/runs.py") and _ignored(["**/*.pyc"], "a/b/c.pyc")


def test_the_consumer_health_check_tests_the_consumer_not_redis_through_toxiproxy(compose: dict) -> None:
    consumer = compose["services"]["consumer"]
    test = consumer["healthcheck"]["test"]
    text = " ".join(test)
    assert "toxiproxy" not in text and "redis" not in text.lower() and "REDIS_URL" not in text
    assert test[:4] == ["CMD", "python", "-m", "target_app.consumer"] and "--check" in test
    # The file it checks is the one the consumer's command keeps touching.
    beat = test[test.index("--check") + 1]
    command = consumer["command"]
    assert command[command.index("--heartbeat") + 1] == beat


def test_locust_services_record_histories_into_a_run_directory_the_host_reads(compose: dict) -> None:
    for name in ("locust-master", "locust-worker"):
        service = compose["services"][name]
        history = service["environment"]["HARNESS_HISTORY_DIR"]
        # "host:container"; the host side may itself hold a ":-" default, hence rsplit.
        mounts = [str(volume).rsplit(":", 1) for volume in service["volumes"]]
        host, container = next((host, container) for host, container in mounts
                               if history.startswith(container.rstrip("/") + "/"))
        assert host.startswith("${HARNESS_RUN_DIR"), f"{name}: histories go to {host}, not the run directory"
        assert history == f"{container}/histories"
        assert service["user"].startswith("${HARNESS_UID")  # files on the host are the caller's
        for key in ("HARNESS_REDIS_URL", "TARGET_APP_WEBHOOK_SECRET", "HARNESS_SEED", "HARNESS_SKUS"):
            assert service["environment"].get(key), f"{name} lacks {key}"


def _steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_permissions_are_least_privilege(path: Path) -> None:
    workflow = yaml.safe_load(path.read_text())
    assert workflow.get("permissions") == {"contents": "read"}, "set top-level permissions: contents: read"
    for name, job in workflow["jobs"].items():
        for scope, level in (job.get("permissions") or {}).items():
            assert level in ("read", "none"), f"job {name} asks {scope}: {level}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_actions_are_pinned_by_full_commit_sha(path: Path) -> None:
    text = path.read_text()
    uses = re.findall(r"^\s*(?:-\s*)?uses:\s*(\S+)(.*)$", text, re.M)
    assert uses
    for action, comment in uses:
        if action.startswith(("./", "docker://")):
            continue
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", action), f"{action} is not pinned by commit"
        assert re.search(r"#\s*v\d+(\.\d+)*", comment), f"{action}: say which tag the SHA is"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_compose_commands_act_on_the_harness_project(path: Path) -> None:
    workflow = yaml.safe_load(path.read_text())
    for step in _steps(workflow):
        for line in str(step.get("run", "")).splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["docker", "compose"]:
                assert words[2:4] == ["-p", PROJECT], f"`{line}` would act on another project"
            if words[:1] == ["harness"] and "--compose" in words and words[1] in ("smoke", "matrix"):
                # Compose stacks share the project and the host ports: one at a time.
                assert words[words.index("--parallel") + 1] == "1", line


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, (f"{name} is not installed; `pip install -e '.[dev]'` brings it "
                   "(a binary wheel on PyPI)")
    return found


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_actionlint_finds_nothing_in_the_workflow(path: Path) -> None:
    result = subprocess.run([_tool("actionlint"), "-no-color", str(path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    result = subprocess.run([_tool("hadolint"), "--no-color", str(ROOT / "Dockerfile")], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_consumers_and_the_app_come_back_and_share_one_crash_point_folder(compose: dict) -> None:
    # A crashed consumer must come back as under a process manager (issue 18), and a
    # crash point armed through the app must reach every consumer's processes.
    services = compose["services"]
    folder = services["app"]["environment"]["TARGET_APP_CRASH_POINTS_DIR"]
    for name in ("app", "consumer"):
        assert services[name]["restart"] in ("unless-stopped", "on-failure"), name
        assert services[name]["environment"]["TARGET_APP_CRASH_POINTS_DIR"] == folder
        assert f"crash-points:{folder}" in services[name]["volumes"], name
    volume = compose["volumes"]["crash-points"]
    assert volume["driver_opts"]["type"] == "tmpfs" and "uid=10001" in volume["driver_opts"]["o"]
    # the image's user is the one the tmpfs belongs to
    assert "--uid 10001" in (ROOT / "Dockerfile").read_text()
