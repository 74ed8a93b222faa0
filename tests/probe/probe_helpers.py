"""Helpers of the probe's tests: where the repository is, how long a probe runs, and
how a service is started on a free loopback port and stopped."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import requests


ROOT = Path(__file__).resolve().parents[2]
# Short probes keep the suite fast; the plan's first windows fall inside them.
PROBE_SECONDS = 3


@dataclass
class Service:
    address: str  # host:port
    process: subprocess.Popen
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def start_service(command: list[str], env: dict[str, str], port: int, log_path: Path) -> Service:
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    service = Service(f"127.0.0.1:{port}", process, log_path)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if requests.get(f"http://{service.address}/healthz", timeout=1).status_code == 200:
                return service
        except requests.RequestException:
            time.sleep(0.1)
    service.stop()
    raise RuntimeError(f"{command[1:3]} did not come up:\n{log_path.read_text(errors='replace')[-2000:]}")
