"""`harness up --foreground` (SIGTERM, SIGKILL) and the registry behind
`harness status --all` / `harness down --all`."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from lifecycle_helpers import REPO, HarnessRun, url_port, wait_for

from harness.stack.info import read_info
from tests.support.cli import clean_env, run_harness

pytestmark = pytest.mark.timeout(180)


def foreground(workdir: Path, root: Path) -> HarnessRun:
    return HarnessRun(workdir, ["up", "--foreground", "--root", str(root), "--app-workers", "1",
                                "--consumers", "1"])


def running(root: Path) -> bool:
    info = read_info(root)
    return info is not None and info.phase == "running"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
                         ids=["SIGTERM", "SIGHUP", "SIGKILL"])
def test_a_foreground_stack_goes_with_its_command(tmp_path: Path, runs: list[HarnessRun], signum: int) -> None:
    root = tmp_path / "fg"
    run = foreground(tmp_path / "w", root)
    runs.append(run.start())
    assert run.wait_until(lambda r: running(root), 60), run.output()
    time.sleep(1.0)  # the command has reported and holds the stack; it must still go with it
    info = read_info(root)
    assert info is not None
    for url in (info.app_url, info.app_direct_url, info.redis_proxy_url, info.toxiproxy_url, info.redis_url):
        run.seen_ports.add(url_port(url))
    since = run.signal(signum)
    left = run.leftovers(since)
    print(f"up --foreground {signal.Signals(signum).name}: clean after {left['seconds']} s")
    assert left["processes"] == [] and left["ports"] == [], left
    assert left["harness_exit"] == (-signal.SIGKILL if signum == signal.SIGKILL else 128 + signum)
    assert not (root / "state.json").exists() or signum == signal.SIGKILL
    status = run_harness("status", "--all", "--json", cwd=REPO, env=_env(run), timeout=60)
    assert json.loads(status.stdout)["stacks"] == []


def _env(run: HarnessRun) -> dict[str, str]:
    """A new user's environment (no HARNESS_*/TARGET_APP_*) on `run`'s registry."""
    return clean_env(HARNESS_REGISTRY=str(run.registry))


def test_status_all_and_down_all_find_every_stack_of_the_checkout(tmp_path: Path, runs: list[HarnessRun]) -> None:
    workdir = tmp_path / "w"
    up = HarnessRun(workdir, ["up", "--root", str(tmp_path / "kept"), "--app-workers", "1", "--consumers", "0"])
    runs.append(up.start())
    fg = foreground(workdir, tmp_path / "fg")
    runs.append(fg.start())
    run = HarnessRun(workdir, ["run", "mixed", "--duration", "60s", "--users", "1", "--app-workers", "1",
                               "--consumers", "1", "--root", str(tmp_path / "none"),
                               "--runs-dir", str(workdir / "runs")])
    runs.append(run.start())
    assert up.process is not None and up.process.wait(timeout=90) == 0, up.output()
    assert fg.wait_until(lambda r: running(tmp_path / "fg"), 60), fg.output()
    assert wait_for(lambda: run.run_dir() and running(run.run_dir() / "stack"), 60), run.output()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run_harness(*args, cwd=REPO, env=_env(up), timeout=120)

    status = cli("status", "--all", "--json")
    assert status.returncode == 0, status.stderr
    owners = {Path(row["root"]).name: row["owner"] for row in json.loads(status.stdout)["stacks"]}
    assert owners == {"kept": "up", "fg": "foreground", "stack": "run"}, owners
    table = cli("status", "--all").stdout
    assert "foreground" in table and str(tmp_path / "kept") in table

    down = cli("down", "--all")
    assert down.returncode == 0, down.stderr
    assert down.stdout.count("stopped") == 3, down.stdout
    assert json.loads(cli("status", "--all", "--json").stdout)["stacks"] == []
    # The foreground command notices and fails as a harness failure; the run fails as
    # soon as it touches its stack (exit 2), or stops cleanly on SIGTERM before that.
    assert fg.process is not None and fg.process.wait(timeout=30) == 2
    left = run.leftovers(run.signal(signal.SIGTERM))
    assert left["processes"] == [] and left["harness_exit"] in (2, 143), left
    assert "no stack is running" in cli("down", "--all").stdout
