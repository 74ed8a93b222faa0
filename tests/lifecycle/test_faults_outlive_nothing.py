"""Faults that would outlive a killed run: on a stack `harness up` left (which must keep
running) and on a Toxiproxy the run does not own (a shared, "real" one).

- SIGKILL of a run attached to a `harness up` stack: the janitor removes the run's
  toxics and starts the consumer it had paused; the stack keeps running.
- SIGKILL of a run on a shared Toxiproxy: its prefixed proxies and toxics go.
- Everything of that run killed at once (harness, janitor, supervisor): the proxies
  stay behind, and the next `harness up` on that Toxiproxy reclaims them.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import requests
from lifecycle_helpers import (
    HarnessRun,
    processes_with_env,
    sigkill_all,
    toxics_on,
    under_load_with_toxic,
    wait_for,
)

from harness.nemesis.toxiproxy_client import Nemesis
from harness.stack.info import read_info
from harness.toxiproxy.server import EmbeddedToxiproxy

pytestmark = pytest.mark.timeout(240)

PLAN = """seed: 1
windows:
  - {at: 1s, for: 30s, toxic: {proxy: app, type: latency, stream: downstream, attributes: {latency: 50}}}
  - {at: 1s, for: 30s, toxic: {proxy: redis, type: latency, stream: upstream, attributes: {latency: 5}}}
  - {at: 1s, for: 30s, process: {action: pause, service: consumer-1}}
"""


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    """PLAN, written where the test's run can read it."""
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    return path


def paused_consumer(run: HarnessRun) -> bool:
    lease = run.lease()
    return under_load_with_toxic(run) and bool(lease and lease.services)


def test_sigkill_of_a_run_on_a_harness_up_stack_heals_it_and_keeps_it(tmp_path: Path, runs: list[HarnessRun],
                                                                       plan: Path) -> None:
    root = tmp_path / "stack"
    up = HarnessRun(tmp_path / "up", ["up", "--root", str(root), "--app-workers", "1", "--consumers", "2"])
    runs.append(up.start())
    assert up.process is not None and up.process.wait(timeout=90) == 0, up.output()
    info = read_info(root)
    assert info is not None
    run = HarnessRun(tmp_path / "run", ["run", "mixed", "--root", str(root), "--plan", str(plan),
                                        "--duration", "30s", "--users", "2",
                                        "--runs-dir", str(tmp_path / "run" / "runs")])
    runs.append(run.start())
    assert run.wait_until(paused_consumer, 60), run.output()[-3000:]
    assert sorted(toxics_on(info.toxiproxy_url) or []) != []
    since = run.signal(signal.SIGKILL)

    left = run.leftovers(since)  # the run's own processes: harness, janitor, Locust
    print(f"attached SIGKILL: run clean after {left['seconds']} s")
    assert left["processes"] == [], left
    healed = wait_for(lambda: toxics_on(info.toxiproxy_url) == [] and _consumer_running(root), 10)
    assert healed, (toxics_on(info.toxiproxy_url), (run.run_dir() or tmp_path).joinpath("lifeline.log"))
    print(f"attached SIGKILL: faults healed after {time.monotonic() - since:.2f} s")
    # The stack `harness up` started on purpose is still there and healthy.
    assert os.path.exists(f"/proc/{info.supervisor_pid}")
    assert requests.get(f"{info.app_url}/healthz", timeout=5).status_code == 200
    run_dir = run.run_dir()
    assert run_dir is not None and (run_dir / "interrupted.json").is_file()
    down = HarnessRun(tmp_path / "up", ["down", "--root", str(root)])
    assert down.start().process is not None and down.process.wait(timeout=60) == 0


def _consumer_running(root: Path) -> bool:
    info = read_info(root)
    consumer = next((service for service in info.services if service.name == "consumer-1"), None) if info else None
    if consumer is None or consumer.status != "running" or not consumer.pid:
        return False
    pid = consumer.pid
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in ("T", "t", "Z")


@pytest.fixture
def shared_toxiproxy(embedded_toxiproxy: EmbeddedToxiproxy) -> str:
    """A Toxiproxy no run owns (the embedded server in this process, as a real one would be)."""
    Nemesis(embedded_toxiproxy.url)._request("POST", "/proxies", "someone else's proxy",
                                             {"name": "app", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:9"})
    return embedded_toxiproxy.url


@pytest.fixture
def shared_run(tmp_path: Path, runs: list[HarnessRun], shared_toxiproxy: str, plan: Path) -> HarnessRun:
    """A `harness run` of PLAN on the shared Toxiproxy, started (and killed after the test)."""
    workdir = tmp_path / "w"
    run = HarnessRun(workdir, ["run", "mixed", "--plan", str(plan), "--duration", "30s", "--users", "2",
                               "--app-workers", "1", "--consumers", "2", "--root", str(workdir / "none"),
                               "--runs-dir", str(workdir / "runs")], {"TOXIPROXY_URL": shared_toxiproxy})
    runs.append(run.start())
    return run


def test_sigkill_of_a_run_on_a_shared_toxiproxy_removes_its_proxies_only(
        shared_run: HarnessRun, shared_toxiproxy: str) -> None:
    run = shared_run
    assert run.wait_until(under_load_with_toxic, 60), run.output()[-3000:]
    names = set(Nemesis(shared_toxiproxy).proxies())
    ours = {name for name in names if name.startswith("run-")}
    assert len(ours) == 2 and "app" in names, names  # prefixed; the foreign `app` untouched
    since = run.signal(signal.SIGKILL)
    left = run.leftovers(since)
    print(f"shared SIGKILL: clean after {left['seconds']} s")
    assert left["processes"] == [] and left["ports"] == [], left
    assert wait_for(lambda: set(Nemesis(shared_toxiproxy).proxies()) == {"app"}, 5), \
        Nemesis(shared_toxiproxy).proxies()
    assert toxics_on(shared_toxiproxy) == []
    assert list((run.registry / "leases").glob("*.json")) == []


def test_leftovers_of_a_run_killed_whole_are_reclaimed_by_the_next_up(
        tmp_path: Path, runs: list[HarnessRun], shared_run: HarnessRun, shared_toxiproxy: str) -> None:
    run = shared_run
    # The lease records a toxic just before it is applied: wait until the server has it.
    assert run.wait_until(lambda r: under_load_with_toxic(r) and bool(toxics_on(shared_toxiproxy)), 60), \
        run.output()[-3000:]
    # As a cgroup kill would: every process of the run at once, nobody cleans up.
    sigkill_all(processes_with_env(run.marker))
    assert run.process is not None and run.process.wait(timeout=10) == -signal.SIGKILL
    assert wait_for(lambda: not processes_with_env(run.marker), 10)
    left_behind = set(Nemesis(shared_toxiproxy).proxies()) - {"app"}
    assert len(left_behind) == 2 and toxics_on(shared_toxiproxy), "nothing was left to reclaim"
    assert list((run.registry / "leases").glob("*.json")), "the leases must stay for the next command"

    # The next `harness up` on that Toxiproxy (same checkout registry) reclaims them.
    up = HarnessRun(tmp_path / "w", ["up", "--root", str(tmp_path / "next"), "--app-workers", "1",
                                     "--consumers", "0", "--proxy-prefix", "next-",
                                     "--toxiproxy-url", shared_toxiproxy])
    runs.append(up.start())
    assert up.process is not None and up.process.wait(timeout=90) == 0, up.output()
    assert "reclaimed" in up.output()
    assert set(Nemesis(shared_toxiproxy).proxies()) == {"app", "next-app", "next-redis"}
    assert toxics_on(shared_toxiproxy) == []
    assert list((run.registry / "leases").glob("run-*.json")) == []
    run_dir = run.run_dir()
    assert run_dir is not None and (run_dir / "interrupted.json").is_file()
    down = HarnessRun(tmp_path / "w", ["down", "--root", str(tmp_path / "next")])
    assert down.start().process is not None and down.process.wait(timeout=60) == 0
    assert set(Nemesis(shared_toxiproxy).proxies()) == {"app"}
