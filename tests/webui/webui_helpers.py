"""Helpers of the web UI tests: a Locust web UI on a free loopback port against a
test stack, the harness CLI, and Debian's Chromium for the browser test."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from harness.ports import free_ports
from tests.support.cli import clean_env, run_harness

REPO = Path(__file__).resolve().parents[2]
LOCUST = Path(sys.executable).with_name("locust")
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def harness(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return run_harness(*args, cwd=cwd, env=clean_env(), timeout=timeout)


@dataclass
class LocustWebUI:
    """`locust -f harness/locustfiles/SCENARIO.py` with its web UI, standalone, on loopback."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path
    runs: Path
    workers: tuple[subprocess.Popen[bytes], ...] = ()

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return requests.get(self.url + path, timeout=10, **kwargs)

    def post(self, path: str, **kwargs: Any) -> requests.Response:
        return requests.post(self.url + path, timeout=10, **kwargs)

    def stop(self) -> None:
        for process in (self.process, *self.workers):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in (self.process, *self.workers):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)

    def wait_verdict(self, timeout: float = 90.0) -> dict[str, Any]:
        """The verdict once the tab is done checking (bounded)."""
        deadline = time.monotonic() + timeout
        verdict: dict[str, Any] = {}
        while time.monotonic() < deadline:
            verdict = self.get("/chaos/api/state").json()["verdict"]
            if verdict["status"] in ("done", "error"):
                return verdict
            time.sleep(0.5)
        raise AssertionError(f"no verdict within {timeout:.0f}s: {verdict}\n{self.log.read_text()[-3000:]}")


def start_locust_web(scenario: str, stack_root: Path, workdir: Path, *, workers: int = 0) -> LocustWebUI:
    """Standalone, or with `workers` > 0 a master and that many `locust --worker`
    processes talking over TCP on loopback (as workers on other machines would)."""
    port, master_port = free_ports(2)
    log = workdir / f"locust-{port}.log"
    runs = workdir / "runs"
    locustfile = str(REPO / "harness" / "locustfiles" / f"{scenario}.py")
    argv = [str(LOCUST), "-f", locustfile, "--web-host", "127.0.0.1",
            "--web-port", str(port), "--harness-root", str(stack_root), "--chaos-runs-dir", str(runs),
            "--chaos-plans-dir", str(REPO / "harness" / "plans"), "--chaos-drain-timeout", "20"]
    if workers:
        argv += ["--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port)]

    def spawn(command: list[str], path: Path) -> subprocess.Popen[bytes]:
        with open(path, "wb") as out:
            return subprocess.Popen(command, cwd=workdir, env=clean_env(), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)

    process = spawn(argv, log)
    started = tuple(spawn([str(LOCUST), "-f", locustfile, "--worker", "--master-host", "127.0.0.1",
                           "--master-port", str(master_port)], workdir / f"worker-{index}.log")
                    for index in range(workers))
    web = LocustWebUI(process, f"http://127.0.0.1:{port}", log, runs, started)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"locust exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if web.get("/chaos/api/state").status_code == 200 and \
                    (not workers or web.get("/worker-count").json().get("worker_count") == workers):
                return web
        except requests.RequestException:
            pass
        time.sleep(0.2)
    web.stop()
    raise AssertionError(f"the Locust web UI did not answer within 30 s:\n{log.read_text()[-3000:]}")


def chromium_path() -> str:
    """Debian's Chromium, or a failed test that says how to install it."""
    for candidate in CHROMIUM_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    pytest.fail("chromium is not installed: the web UI test drives Debian's Chromium. "
                "Install it with `apt-get install chromium` (scripts/setup.sh does it), "
                "or run `make test` after scripts/setup.sh.")
    raise AssertionError("unreachable")
