"""The probed service's process (harness.probe.service.ProbedService) and the rig's
checks before it starts: readiness, the process faults of a plan on the whole process
group, a death nobody asked for, the lease entries, an unreachable dependency."""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from harness.nemesis.toxiproxy_client import NemesisError
from harness.ports import free_port
from harness.probe.config import parse_config
from harness.probe.rig import ProbeRig
from harness.probe.service import ProbedService, ServiceFailed
from harness.probe.service_config import ReadyCheck, ServiceConfig
from harness.process_handle import child_pids, group_members, pid_alive, pid_stopped
from tests.support.registry import registry_for_session

# A parent that serves HTTP through a child of its own: a signal to the parent alone
# would leave the child serving, so every fault must reach the whole process group.
SERVER = ("import subprocess, sys; "
          "child = subprocess.Popen([sys.executable, '-m', 'http.server', '--bind', '127.0.0.1', sys.argv[1]]); "
          "sys.exit(child.wait())")


@pytest.fixture(scope="module", autouse=True)
def _registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from registry_for_session(tmp_path_factory)  # the rig's lease goes here


class Recorder:
    """The run's guard as the service sees it (ProcessGuard): which groups are on the lease."""

    def __init__(self) -> None:
        self.groups: list[int] = []

    def add_process(self, pid: int, name: str) -> None:
        self.groups.append(pid)

    def remove_process(self, pid: int) -> None:
        self.groups.remove(pid)


def service(tmp_path: Path, guard: Recorder | None = None, *, timeout: float = 15.0) -> ProbedService:
    config = ServiceConfig(command=(sys.executable, "-c", SERVER, "{port}"),
                           ready=ReadyCheck(path="/", timeout=timeout))
    return ProbedService(config, port=free_port(), dependencies={}, log_path=tmp_path / "service.log",
                         base_env=os.environ, guard=guard)


def answers(probed: ProbedService) -> bool:
    try:
        return requests.get(f"http://{probed.address}/", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def all_stopped(pids: list[int], *, within: float = 5.0) -> bool:
    """True once every pid is stopped: SIGSTOP is sent at once but takes effect when the
    kernel next schedules each process, later than the kill() on a busy machine."""
    deadline = time.monotonic() + within
    while not all(pid_stopped(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_faults_act_on_the_whole_group_and_every_start_waits_until_ready(tmp_path: Path) -> None:
    guard = Recorder()
    probed = service(tmp_path, guard)
    try:
        probed.start()
        first = probed.pid
        assert first is not None and answers(probed) and guard.groups == [first]
        assert len(group_members(first)) == 2  # the parent and its serving child
        probed.pause("service")
        assert all_stopped(group_members(first))
        probed.check()  # paused is not dead
        probed.resume("service")
        assert answers(probed)
        probed.kill("service")
        assert group_members(first) == [] and guard.groups == [] and not answers(probed)
        probed.check()  # killed on purpose: no failure
        probed.start("service")
        second = probed.pid
        assert second != first and answers(probed) and guard.groups == [second]
        probed.restart("service")
        assert probed.pid not in (first, second) and answers(probed) and probed.starts == 3
        with pytest.raises(ServiceFailed, match="one process, 'service', not 'app'"):
            probed.kill("app")
    finally:
        last = probed.pid
        probed.stop()
        probed.stop()  # safe to repeat
    assert last is not None and group_members(last) == [] and guard.groups == []


# A worker with a pool: a parent serving HTTP and three children doing nothing.
POOL = ("import subprocess, sys, http.server; "
        "pool = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']) for _ in range(3)]; "
        "http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler)"
        ".serve_forever()")


def test_kill_child_kills_the_pool_process_the_seed_picks_and_the_parent_lives(tmp_path: Path) -> None:
    config = ServiceConfig(command=(sys.executable, "-c", POOL, "{port}"), ready=ReadyCheck(path="/", timeout=15))
    probed = ProbedService(config, port=free_port(), dependencies={}, log_path=tmp_path / "service.log",
                           base_env=os.environ)
    try:
        probed.start()
        assert probed.pid is not None
        deadline = time.monotonic() + 10
        while len(child_pids(probed.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        before = child_pids(probed.pid)
        assert len(before) == 3, before
        # The same pick among the same children is the same child: the seed decides.
        chosen = before[random.Random("7:w0").randrange(3)]
        assert probed.kill_child("service", "7:w0") == chosen
        assert not pid_alive(chosen) and child_pids(probed.pid) == [p for p in before if p != chosen]
        assert pid_alive(probed.pid) and answers(probed)  # only the child died
        probed.kill_child("service", "7:w1")
        probed.kill_child("service", "7:w2")
        with pytest.raises(NemesisError, match="has no child process to kill"):
            probed.kill_child("service", "7:w3")
    finally:
        probed.stop()


def test_a_death_nobody_asked_for_is_a_failure_with_the_log(tmp_path: Path) -> None:
    probed = service(tmp_path)
    try:
        probed.start()
        assert probed.pid is not None
        os.killpg(probed.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while pid_alive(probed.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(ServiceFailed, match=r"exited on its own with code -9; end of .*service.log"):
            probed.check()
    finally:
        probed.stop()


def test_an_unreachable_dependency_stops_the_run_before_the_service_starts(tmp_path: Path) -> None:
    port = free_port()
    config = parse_config({"endpoints": [{"path": "/p", "body": {"a": "{uuid}"}, "id": {"pointer": "/id"}}],
                           "service": {"command": ["never-run", "{port}"]},
                           "dependencies": {"db": f"127.0.0.1:{port}"}})
    rig = ProbeRig(config, tmp_path, upstream=None, toxiproxy_url=None)
    with pytest.raises(ServiceFailed, match=rf"dependencies.db: 127.0.0.1:{port} does not accept connections"):
        rig.__enter__()
    assert not (tmp_path / "service.log").exists()  # nothing was started
