"""`harness completion bash`: the script, sourced in a real bash, completes from the parser."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from harness.bundled import bundled_plan_names
from harness.catalog import SCENARIOS
from harness.cli.completion import command_shapes
from harness.cli.main import build_parser
from harness.exit_codes import EXIT_HARNESS
from tests.support.cli import run_harness

CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    completed = run_harness("completion", "bash", env={**os.environ, "PYTHONPATH": str(CHECKOUT)}, timeout=60)
    assert completed.returncode == 0, completed.stderr
    path = tmp_path_factory.mktemp("completion") / "harness.bash"
    path.write_text(completed.stdout)
    return path


def complete(script: Path, words: list[str], cwd: Path) -> list[str]:
    """COMPREPLY after completing the last of `words` (the word being typed)."""
    program = (f"source {shlex.quote(str(script))}\n"
               f"COMP_WORDS=({' '.join(shlex.quote(word) for word in words)})\n"
               f"COMP_CWORD={len(words) - 1}\n"
               "_harness_complete\n"
               'printf "%s\\n" "${COMPREPLY[@]}"\n')
    completed = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], capture_output=True, text=True,
                               timeout=30, cwd=cwd, stdin=subprocess.DEVNULL)
    assert completed.returncode == 0 and completed.stderr == "", completed.stderr
    return [line for line in completed.stdout.splitlines() if line]


@pytest.mark.parametrize(("words", "expected"), [
    (["harness", "ru"], ["run"]),
    (["harness", "run", ""], list(SCENARIOS)),
    (["harness", "run", "--users", "5", "time"], ["timeout_replay"]),  # 5 is --users' value, not a positional
    (["harness", "run", "mixed", "--js"], ["--json"]),
    (["harness", "run", "mixed", "--unsafe-disable", "api", "--pl"], ["--plan"]),
    (["harness", "fault", "add", "latency", "--stream", ""], ["upstream", "downstream"]),
    (["harness", "swarm", ""], ["begin"]),
    (["harness", "swarm", "begin", "re"], ["redelivered_messages"]),
    (["harness", "check", "--scenario", "dup"], ["duplicate_webhooks"]),
    (["harness", "completion", ""], ["bash"]),
    (["harness", "run", "mixed", "--duration", ""], []),  # a free value: nothing to offer
])
def test_candidates(script: Path, tmp_path: Path, words: list[str], expected: list[str]) -> None:
    assert complete(script, words, tmp_path) == expected


def test_every_command_offers_its_subcommands(script: Path, tmp_path: Path) -> None:
    shapes = [shape for shape in command_shapes(build_parser()) if shape.subcommands]
    assert {"up", "down", "status", "fault", "run", "check", "smoke", "matrix", "completion"} <= set(
        shapes[0].subcommands)
    for shape in shapes:
        assert complete(script, [*shape.path.split(), ""], tmp_path) == shape.subcommands, shape.path


def test_plan_offers_the_bundled_plans_and_files(script: Path, tmp_path: Path) -> None:
    (tmp_path / "my-plan.yaml").write_text("seed: 1\n")
    candidates = complete(script, ["harness", "run", "mixed", "--plan", ""], tmp_path)
    assert set(candidates) == {*bundled_plan_names(), "my-plan.yaml"}
    assert complete(script, ["harness", "run", "mixed", "--plan", "my"], tmp_path) == ["my-plan.yaml"]


def test_a_path_positional_completes_file_names(script: Path, tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    assert complete(script, ["harness", "check", "ru"], tmp_path) == ["runs"]


def test_every_command_of_the_parser_is_in_the_script(script: Path) -> None:
    text = script.read_text()
    for shape in command_shapes(build_parser()):
        assert f"[{shlex.quote(shape.path)}]=" in text, shape.path
        for option in shape.options:
            assert option in text


def test_an_unknown_shell_is_a_usage_error(tmp_path: Path) -> None:
    completed = run_harness("completion", "fish", cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(CHECKOUT)},
                            timeout=60)
    assert completed.returncode == EXIT_HARNESS and completed.stdout == ""
    assert completed.stderr.startswith("harness: completion: argument shell: invalid choice: 'fish'")
