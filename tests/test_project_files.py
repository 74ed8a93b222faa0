"""The files a user or CI runs must agree with each other: the README's two
commands, the Makefile, `.ci/run` and the smoke workflow for compose."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from harness.bundled import plan_path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert first_block, "the README must start with a shell block of commands"
    return [line.split("#")[0].strip() for line in first_block.group(1).splitlines() if line.strip()]


def test_the_readme_starts_with_setup_and_run_then_the_tests() -> None:
    assert _readme_commands() == ["make demo", "make test"]


def test_the_readmes_first_screen_has_the_exit_code_table() -> None:
    """One row per exit code, each with its verdict, within the README's first 40 lines,
    and the codes are the ones the CLI uses (harness.exit_codes)."""
    from harness.exit_codes import EXIT_HARNESS, VERDICT_EXIT_CODES

    first_screen = (ROOT / "README.md").read_text().splitlines()[:40]
    rows = {int(m[1]): m[2] for line in first_screen if (m := re.match(r"\| (\d) \| `?([A-Za-z]+)`? \|", line))}
    expected = {code: verdict.upper() for verdict, code in VERDICT_EXIT_CODES.items()} | {EXIT_HARNESS: "error"}
    assert rows == expected, rows


def test_ci_runs_exactly_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in script.splitlines()
                if line.strip() and not line.lstrip().startswith(("#", "set ", "cd "))]
    assert commands == ["make test"]


def test_make_targets_set_up_before_they_run() -> None:
    makefile = (ROOT / "Makefile").read_text()
    # `make test` sets up, then runs the static checks, then pytest: a lint finding fails it.
    assert re.search(r"^lint: setup\n\t\$\(VENV\)/bin/ruff check [^\n]+\n\t\$\(VENV\)/bin/mypy\n", makefile, re.M)
    # ... with bytecode cached whatever the environment says (pytest's rewritten tests).
    assert re.search(r"^test: lint\n\tenv -u PYTHONDONTWRITEBYTECODE \$\(VENV\)/bin/python -m pytest", makefile, re.M)
    assert re.search(r"^demo: setup\n\t\$\(VENV\)/bin/harness run ", makefile, re.M)
    assert re.search(r"^setup:\n\t\./scripts/setup\.sh", makefile, re.M)
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    # Each Debian package the harness or its tests need is installed when missing, and
    # the system service its install starts is stopped (the tests run their own).
    installs = {match.group(1): match.group(3)
                for match in re.finditer(r"^install_missing (\S+) (\S+)(?: (\S+))?$", setup, re.M)}
    assert installs == {"redis-server": "redis-server", "chromium": None, "postgresql": "postgresql",
                        "rabbitmq-server": "rabbitmq-server", "nats-server": None, "faketime": None}
    assert 'apt-get install -y -qq "$package"' in setup
    assert 'service "$service" stop' in setup
    assert "pip\" install -q -e '.[dev]'" in setup
    # The project's bytecode is written at setup: every process reads it, even where the
    # environment sets PYTHONDONTWRITEBYTECODE.
    assert re.search(r"^\"\$VENV/bin/python\" -m compileall -q -j 0 harness target_app ", setup, re.M)


def test_the_demo_plan_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    plan = re.search(r"--plan (\S+)", makefile).group(1)
    assert plan_path(plan).is_file()


def test_the_smoke_workflow_runs_the_smoke_job_on_compose_and_keeps_the_runs() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "chaos-smoke.yml").read_text())
    steps = workflow["jobs"]["smoke"]["steps"]
    commands = [step.get("run", "") for step in steps]
    assert any(command.startswith("harness smoke --compose") for command in commands)
    assert any(command.startswith("docker compose") and command.split()[-1] == "build" for command in commands)
    upload = [step for step in steps if str(step.get("uses", "")).startswith("actions/upload-artifact")]
    assert upload and upload[0]["if"] == "always()" and upload[0]["with"]["path"] == "runs/"


def test_the_readme_documents_every_setting_the_app_reads() -> None:
    source = (ROOT / "target_app" / "settings.py").read_text()
    read = set(re.findall(r'"(TARGET_APP_[A-Z_]+)"', source))
    documented = set(re.findall(r"`(TARGET_APP_[A-Z_]+)`", (ROOT / "README.md").read_text()))
    assert read, "no settings found; did target_app/settings.py move?"
    assert read <= documented, f"undocumented in README: {sorted(read - documented)}"
