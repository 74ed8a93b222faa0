"""Helpers of the web UI tests: a Locust web UI on a free loopback port against a
test stack, the harness CLI, and Debian's Chromium for the browser test."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from harness.ports import free_ports
from tests.support.cli import clean_env, run_harness

REPO = Path(__file__).resolve().parents[2]
LOCUST = Path(sys.executable).with_name("locust")


def harness(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return run_harness(*args, cwd=cwd, env=clean_env(), timeout=timeout)


@dataclass
class LocustWebUI:
    """`locust -f harness/locustfiles/SCENARIO.py` with its web UI, standalone, on loopback.

    `get` and `post` send what they are given (Locust's own form posts included);
    `act` is a call of the tab's own page: JSON, with the page's token (`token`)."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path
    runs: Path
    workers: tuple[subprocess.Popen[bytes], ...] = ()
    auth: tuple[str, str] | None = None
    token: str = ""

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return requests.get(self.url + path, timeout=10, **{"auth": self.auth, **kwargs})

    def post(self, path: str, **kwargs: Any) -> requests.Response:
        return requests.post(self.url + path, timeout=10, **{"auth": self.auth, **kwargs})

    def act(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> requests.Response:
        """A state-changing call as the tab's script makes it."""
        return requests.request(method, self.url + path, json=dict(body or {}), auth=self.auth, timeout=10,
                                headers={"X-Chaos-Token": self.token})

    def page_token(self) -> str:
        """The token the tab's standalone page hands its script."""
        found = re.search(r'data-chaos-token="([^"]+)"', self.get("/chaos/").text)
        assert found, "the tab's page carries no token"
        return found.group(1)

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


def start_locust_web(scenario: str, stack_root: Path, workdir: Path, *, workers: int = 0,
                     web_host: str | None = "127.0.0.1", extra: Sequence[str] = (),
                     env: Mapping[str, str] | None = None, auth: tuple[str, str] | None = None) -> LocustWebUI:
    """Standalone, or with `workers` > 0 a master and that many `locust --worker`
    processes talking over TCP on loopback (as workers on other machines would).
    `web_host=None` gives no --web-host (the tab's default bind); `env` is added to the
    clean environment; `auth` is sent with every request (for --web-login)."""
    port, master_port = free_ports(2)
    log = workdir / f"locust-{port}.log"
    runs = workdir / "runs"
    locustfile = str(REPO / "harness" / "locustfiles" / f"{scenario}.py")
    argv = [str(LOCUST), "-f", locustfile, *(["--web-host", web_host] if web_host is not None else []),
            "--web-port", str(port), "--harness-root", str(stack_root), "--chaos-runs-dir", str(runs),
            "--chaos-plans-dir", str(REPO / "harness" / "plans"), "--chaos-drain-timeout", "20", *extra]
    if workers:
        argv += ["--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(master_port)]

    def spawn(command: list[str], path: Path) -> subprocess.Popen[bytes]:
        with open(path, "wb") as out:
            return subprocess.Popen(command, cwd=workdir, env=clean_env(**dict(env or {})), stdout=out,
                                    stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)

    process = spawn(argv, log)
    started = tuple(spawn([str(LOCUST), "-f", locustfile, "--worker", "--master-host", "127.0.0.1",
                           "--master-port", str(master_port)], workdir / f"worker-{index}.log")
                    for index in range(workers))
    web = LocustWebUI(process, f"http://127.0.0.1:{port}", log, runs, started, auth)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"locust exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if web.get("/chaos/api/state").status_code == 200 and \
                    (not workers or web.get("/worker-count").json().get("worker_count") == workers):
                web.token = web.page_token()
                return web
        except requests.RequestException:
            pass
        time.sleep(0.2)
    web.stop()
    raise AssertionError(f"the Locust web UI did not answer within 30 s:\n{log.read_text()[-3000:]}")

