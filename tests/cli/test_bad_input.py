"""Bad input stops a verdict command before anything starts: exit 2, one line on stderr,
nothing on stdout, and no run directory (not even an empty one).

The commands run in-process with `run`, `smoke`, `matrix` and `begin_swarm` replaced by
tripwires: reaching one means the input was accepted, which fails the test before any
stack could start.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

import pytest

from harness.cli import run_commands
from harness.cli.main import main
from harness.exit_codes import EXIT_HARNESS
from tests.support.cli import run_harness

NOT_A_PLAN = "seed: 3\n"  # parses as YAML, but has neither windows nor random
NOT_YAML = "windows: [\n  {at: 1s\n"
UNKNOWN_TOXIC = "seed: 1\nwindows:\n  - {at: 1s, for: 1s, toxic: {proxy: app, type: no_such_toxic}}\n"


def _tripwire(*args: Any, **kwargs: Any) -> NoReturn:
    raise AssertionError("the command started although its input was bad")


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOXIPROXY_URL", raising=False)
    for name in ("run", "smoke", "matrix"):
        monkeypatch.setattr(run_commands, name, _tripwire)
    monkeypatch.setattr("harness.webui.session.begin_swarm", _tripwire)
    (tmp_path / "not-a-plan.yaml").write_text(NOT_A_PLAN)
    (tmp_path / "not-yaml.yaml").write_text(NOT_YAML)
    (tmp_path / "unknown-toxic.yaml").write_text(UNKNOWN_TOXIC)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "earlier-run").mkdir()
    return tmp_path


BAD_COMMANDS = [
    ["run", "no_such_scenario"],
    ["run", "timeout_replay", "--plan", "no-such-plan"],
    ["run", "timeout_replay", "--plan", "missing/plan.yaml"],
    ["run", "timeout_replay", "--plan", "not-a-plan.yaml"],
    ["run", "timeout_replay", "--plan", "not-yaml.yaml"],
    ["run", "timeout_replay", "--plan", "unknown-toxic.yaml"],
    ["run", "timeout_replay", "--unsafe-disable", "domain,no-such-layer"],
    ["run", "timeout_replay", "--duration", "5 parsecs"],
    ["run", "timeout_replay", "--duration", "0s"],
    ["run", "timeout_replay", "--drain-timeout", "-1s"],
    ["run", "timeout_replay", "--workers-wait", "soon"],
    ["run", "timeout_replay", "--users", "0"],
    ["run", "timeout_replay", "--seed", "x"],
    ["run", "timeout_replay", "--scale-workers", "2"],  # needs --compose
    ["run", "timeout_replay", "--workers", "0"],  # 0 only with --remote-workers
    ["run", "timeout_replay", "--master-bind", "host:port"],
    ["run", "timeout_replay", "--think-time", "soon"],
    ["run", "timeout_replay", "--think-time", "0.3-0.1"],  # ends below its start
    ["run", "timeout_replay", "--compose", "--scale-workers", "2", "--think-time", "0.1"],
    ["smoke", "--think-time", "-0.1"],
    ["smoke", "--stop-timeout", "-1s"],
    ["smoke", "--duration", "0"],
    ["smoke", "--users", "-3"],
    ["smoke", "--parallel", "0"],
    ["matrix", "--mutants", "none,no-such-mutant"],
    ["matrix", "--scenarios", "mixed,no_such_scenario"],
    ["matrix", "--scenarios", ","],
    ["matrix", "--duration", "2x"],
    ["check"],
    ["check", "runs/no-such-run"],
    ["check", "runs/earlier-run", "--drain-timeout", "later"],
    ["swarm", "begin", "no_such_scenario"],
    ["swarm", "begin", "mixed", "--plan", "no-such-plan"],
    ["swarm", "begin", "mixed", "--plan", "not-a-plan.yaml"],
    ["swarm", "begin", "mixed", "--root", "no-stack-here"],
    ["up", "--health-timeout", "a while"],
]


@pytest.mark.parametrize("argv", BAD_COMMANDS, ids=" ".join)
def test_bad_input_is_one_line_and_no_run_directory(workdir: Path, capsys: pytest.CaptureFixture[str],
                                                     argv: list[str]) -> None:
    before = sorted(path.relative_to(workdir) for path in workdir.rglob("*"))
    assert main(argv) == EXIT_HARNESS
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("harness: ") and err.count("\n") == 1, err
    assert sorted(path.relative_to(workdir) for path in workdir.rglob("*")) == before


@pytest.mark.parametrize(("name", "value"), [
    ("TARGET_APP_UNSAFE_DISABLE", "domain,no-such-layer"), ("TARGET_APP_MAX_DELIVERIES", "many"),
])
@pytest.mark.parametrize("argv", [["run", "mixed"], ["smoke"], ["matrix"]], ids=" ".join)
def test_a_bad_app_setting_in_the_environment_stops_the_run(workdir: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                                            name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    assert main(argv) == EXIT_HARNESS
    err = capsys.readouterr().err
    assert err.startswith(f"harness: environment: {name}") and err.count("\n") == 1, err
    assert sorted(path.name for path in (workdir / "runs").iterdir()) == ["earlier-run"]


def test_a_plan_that_does_not_parse_is_named_in_the_usage_error(workdir: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "mixed", "--plan", "not-a-plan.yaml"]) == EXIT_HARNESS
    err = capsys.readouterr().err
    assert err.startswith("harness: run: argument --plan: ") and "not-a-plan.yaml" in err


def test_bad_input_through_the_installed_entry_point(tmp_path: Path) -> None:
    completed = run_harness("run", "mixed", "--plan", "no-such-plan", "--runs-dir", str(tmp_path / "runs"),
                            cwd=tmp_path, timeout=60)
    assert completed.returncode == EXIT_HARNESS and completed.stdout == ""
    assert completed.stderr.count("\n") == 1 and "no bundled plan 'no-such-plan'" in completed.stderr
    assert not (tmp_path / "runs").exists()
