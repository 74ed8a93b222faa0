"""Driving `harness run` as a CI runner would, and proving what it left behind.

Every harness process a test starts gets a registry of its own (`HARNESS_REGISTRY`
in its environment). Every process the run starts inherits that environment (the
janitor, the stack's supervisor and services, Locust), so "a process of this run"
is exactly "a live process whose environment names this registry": no guessing by
name, no confusion with the stacks of other tests running at the same time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from harness.process_handle import pid_alive
from harness.stack import registry
from harness.stack import services as svc
from harness.stack.info import StackInfo, read_info
from harness.stack.registry import REGISTRY_ENV
from tests.support.cli import clean_env, start_harness

REPO = Path(__file__).resolve().parents[2]
# How long a test waits, from the signal, for nothing of a run to be left. The promise
# is 10 s on a quiet machine; the seconds it took are printed by each test as a
# measurement, never asserted (a busy CI machine stretches every stop).
CLEAN_WITHIN = 60.0
T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, interval: float = 0.02) -> T | None:
    """The first truthy value of predicate() within timeout, else None (bounded poll)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(interval)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def processes_with_env(entry: str) -> list[int]:
    """Live processes whose initial environment holds `entry` (e.g. HARNESS_REGISTRY=/x)."""
    wanted = entry.encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in environ and pid_alive(int(name)):
            found.append(int(name))
    return found


def url_port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def state_ports(info: StackInfo) -> list[int]:
    ports = [service.port for service in info.services if service.port]
    urls = [info.app_url, info.app_direct_url, info.redis_proxy_url]
    if info.toxiproxy_kind != "external":  # a shared Toxiproxy is not the run's to stop
        urls.append(info.toxiproxy_url)
    ports += [url_port(url) for url in urls if url]
    return sorted(set(ports))


@dataclass
class HarnessRun:
    """One `harness ...` process in its own registry, with what it showed while running."""

    workdir: Path
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = None
    seen_ports: set[int] = field(default_factory=set)
    seen_toxiproxies: set[str] = field(default_factory=set)

    @property
    def registry(self) -> Path:
        return self.workdir / "registry"

    @property
    def runs(self) -> Path:
        return self.workdir / "runs"

    @property
    def marker(self) -> str:
        return f"{REGISTRY_ENV}={self.registry}"

    def start(self) -> HarnessRun:
        env = clean_env()
        env.pop("TOXIPROXY_URL", None)
        env.update(self.env)
        env[REGISTRY_ENV] = str(self.registry)
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.workdir / "harness.out", "ab") as out:
            self.process = start_harness(*self.args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        return self

    def output(self) -> str:
        return (self.workdir / "harness.out").read_text(errors="replace")

    def run_dir(self) -> Path | None:
        found = sorted(self.runs.glob("*/")) if self.runs.is_dir() else []
        return found[0] if found else None

    def stack_state(self) -> StackInfo | None:
        run_dir = self.run_dir()
        return read_info(run_dir / "stack") if run_dir else None

    def lease(self) -> registry.Lease | None:
        for path in sorted((self.registry / "leases").glob("run-*.json")):
            lease = registry.read_lease(path)
            if lease is not None:
                return lease
        return None

    def observe(self) -> None:
        """Remember the ports and Toxiproxy the run uses (read while it runs)."""
        info = self.stack_state()
        if info is not None:
            self.seen_ports.update(state_ports(info))
            if info.toxiproxy_url:
                self.seen_toxiproxies.add(info.toxiproxy_url)

    def wait_until(self, predicate: Callable[[HarnessRun], bool], timeout: float) -> bool:
        def check() -> bool:
            self.observe()
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"the harness exited ({self.process.returncode}) before the moment:\n"
                                     f"{self.output()[-3000:]}")
            return predicate(self)

        return bool(wait_for(check, timeout))

    def signal(self, signum: int) -> float:
        assert self.process is not None
        self.observe()
        self.process.send_signal(signum)
        return time.monotonic()

    def leftovers(self, since: float, within: float = CLEAN_WITHIN) -> dict[str, Any]:
        """Wait (bounded) until no process of the run and none of its ports is left;
        return what is left and how long it took."""
        assert self.process is not None
        deadline = since + within

        def gone() -> bool:
            return (self.process.poll() is not None and not processes_with_env(self.marker)
                    and not [p for p in self.seen_ports if svc.port_listening(p)])

        while not gone() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.process.poll() is None:
            try:
                self.process.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                pass
        return {
            "seconds": round(time.monotonic() - since, 2),
            "harness_exit": self.process.poll(),
            "processes": [_describe(pid) for pid in processes_with_env(self.marker)],
            "ports": sorted(p for p in self.seen_ports if svc.port_listening(p)),
        }

    def kill_everything(self) -> None:
        """Test teardown: whatever this test's harness left is SIGKILLed by pid."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        sigkill_all(processes_with_env(self.marker))


def sigkill_all(pids: list[int]) -> None:
    """SIGKILL each pid; one that has exited meanwhile is no error."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _describe(pid: int) -> str:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmdline = "?"
    return f"{pid}: {cmdline[:160]}"


# The moments of a run, read from what it leaves on disk and in its lease.

def stack_starting(run: HarnessRun) -> bool:
    info = run.stack_state()
    return info is not None and info.phase == "starting" and any(service.pid for service in info.services)


def under_load(run: HarnessRun) -> bool:
    lease = run.lease()
    return bool(lease and any(process.name == "locust" for process in lease.processes))


def under_load_with_toxic(run: HarnessRun) -> bool:
    lease = run.lease()
    return under_load(run) and bool(lease and lease.toxics)


def draining(run: HarnessRun) -> bool:
    run_dir = run.run_dir()
    lease = run.lease()
    return bool(run_dir and lease and (run_dir / "locust" / "stats_stats.csv").is_file()
                and not lease.processes and not (run_dir / "export.ndjson").exists())


def checking(run: HarnessRun) -> bool:
    run_dir = run.run_dir()
    return bool(run_dir and (run_dir / "final_reads.ndjson").is_file()
                and not (run_dir / "stack" / "state.json").exists()
                and not (run_dir / "result.json").exists())


def interrupted_mark(run_dir: Path) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    return read_json(run_dir / "interrupted.json"), read_json(run_dir / "result.json")


def toxics_on(url: str) -> list[str] | None:
    """Toxic names on a Toxiproxy, or None when it does not answer."""
    import requests

    try:
        proxies = requests.get(f"{url}/proxies", timeout=2).json()
    except (requests.RequestException, ValueError):
        return None
    return [f"{name}/{toxic['name']}" for name, proxy in proxies.items() for toxic in proxy.get("toxics") or []]
