"""The harness installs as a wheel and runs a scenario from the installed package alone.

A copy of this checkout (without its venv, runs and build leftovers, so the shared
checkout is never written to) is built into a wheel with pip; the wheel is installed
without dependencies into a fresh venv, whose site-packages then lists this project's
venv's site-packages *after* its own in a `.pth` file, so Flask, Locust and the rest
need no download. A `.pth` line adds a directory without processing the `.pth` files
in it, so the checkout's editable install cannot shadow the wheel: the test asserts
`harness` is imported from the fresh venv. The run happens in a directory outside the
checkout, so the source tree is not on sys.path either.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from harness.bundled import bundled_plan_names
from harness.catalog import SCENARIOS
from harness.exit_codes import EXIT_INCONCLUSIVE, EXIT_OK
from tests.support.cli import clean_env

CHECKOUT = Path(__file__).resolve().parents[2]
# What a build does not need and must not copy: environments, results, caches.
NOT_SOURCE = shutil.ignore_patterns(".venv", ".git", "runs", ".harness", "build", "dist", "*.egg-info",
                                    "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")


def _run(argv: list[str], *, cwd: Path, timeout: float, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source") / "project"
    shutil.copytree(CHECKOUT, source, ignore=NOT_SOURCE)
    wheels = tmp_path_factory.mktemp("wheels")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(wheels),
                  str(source)], cwd=wheels, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    found = sorted(wheels.glob("idempotency_chaos_harness-*.whl"))
    assert len(found) == 1, found
    return found[0]


def test_the_wheel_ships_the_locustfiles_and_the_plans(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"harness/locustfiles/{scenario}.py" for scenario in SCENARIOS} <= names
    assert {f"harness/plans/{plan}.yaml" for plan in bundled_plan_names()} <= names
    assert any(name.startswith("harness/webui/assets/") for name in names)
    assert "target_app/__init__.py" in names and "harness/cli/main.py" in names
    assert not any(name.startswith(("tests/", "runs/")) for name in names)


def test_an_installed_harness_runs_a_scenario_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    created = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path, timeout=120)
    assert created.returncode == 0, created.stderr
    python = venv / "bin" / "python"
    # The project's pip installs into the fresh venv (which has none of its own).
    installed = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                      "--quiet", str(wheel)], cwd=tmp_path, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    site_packages = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              cwd=tmp_path, timeout=60).stdout.strip())
    # After the venv's own site-packages: the dependencies, never the checkout's harness.
    (site_packages / "zz_project_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {key: value for key, value in clean_env().items() if not key.startswith("PYTHON")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", XDG_STATE_HOME=str(tmp_path / "state"))

    imported = _run([str(python), "-c", "import harness, target_app; print(harness.__file__); "
                     "print(target_app.__file__)"], cwd=outside, env=env, timeout=60)
    assert imported.returncode == 0, imported.stderr
    for location in imported.stdout.split():
        assert Path(location).is_relative_to(site_packages), imported.stdout
    assert shutil.which("harness", path=env["PATH"]) == str(venv / "bin" / "harness")

    runs = tmp_path / "runs"
    completed = _run(["harness", "run", "timeout_replay", "--users", "2", "--duration", "3s",
                      "--plan", "flaky-network", "--app-workers", "2", "--runs-dir", str(runs), "--json"],
                     cwd=outside, env=env, timeout=300)
    assert completed.returncode in (EXIT_OK, EXIT_INCONCLUSIVE), completed.stderr[-3000:]
    document = json.loads(completed.stdout)
    assert document["exit_code"] == completed.returncode
    run_dir = Path(document["run_dir"])
    assert run_dir.parent == runs
    result = json.loads((run_dir / "result.json").read_text())
    assert result["verdict"] == document["verdict"] and all(inv["passed"] for inv in result["invariants"])
    # The bundled plan was read from the installed package.
    settings = json.loads((run_dir / "settings.json").read_text())
    assert Path(settings["plan"]).is_relative_to(site_packages / "harness" / "plans"), settings["plan"]
    assert not (outside / "runs").exists()
