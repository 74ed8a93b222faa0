"""The consumer's own health check (`--heartbeat` / `--check`), which the compose
file uses instead of a Redis ping through Toxiproxy: it must say whether the
consumer's loop runs, whatever state Redis (or a fault on its proxy) is in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ta_helpers import ROOT

from harness.ports import free_port
from target_app.consumer import check_heartbeat, main


def _check(path: Path, max_age: float) -> int:
    return subprocess.run([sys.executable, "-m", "target_app.consumer", "--check", str(path),
                           "--max-age", str(max_age)], cwd=ROOT, timeout=30, check=False).returncode


def _wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_check_without_a_heartbeat_file_is_unhealthy(tmp_path: Path) -> None:
    assert main(["--check", str(tmp_path / "never-written")]) == 1
    beat = tmp_path / "beat"
    beat.touch()
    assert main(["--check", str(beat)]) == 0
    old = time.time() - 120
    os.utime(beat, (old, old))
    assert main(["--check", str(beat), "--max-age", "60"]) == 1
    assert check_heartbeat(beat, max_age=180)


def test_a_consumer_cut_off_from_redis_is_alive_and_a_stopped_one_is_not(tmp_path: Path) -> None:
    beat = tmp_path / "consumer.heartbeat"
    # Nothing listens on this port: Redis is as unreachable as behind a `timeout` toxic.
    env = {**os.environ, "TARGET_APP_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
           "TARGET_APP_REDIS_TIMEOUT": "0.2", "TARGET_APP_CONSUMER_BLOCK_MS": "100"}
    process = subprocess.Popen([sys.executable, "-m", "target_app.consumer", "--heartbeat", str(beat)],
                               cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait_for(beat.exists), "the consumer never wrote its heartbeat"
        first = beat.stat().st_mtime
        # Still touched while every Redis call fails: the check judges the loop, not Redis.
        assert _wait_for(lambda: beat.stat().st_mtime > first), "the heartbeat is not refreshed"
        assert _check(beat, max_age=5) == 0
        # A stuck consumer (here: stopped, as `docker pause` or a deadlock would leave it)
        # stops touching the file and turns unhealthy once it is older than max-age.
        process.send_signal(signal.SIGSTOP)
        time.sleep(1.5)
        assert _check(beat, max_age=1) == 1
        process.send_signal(signal.SIGCONT)
        assert _wait_for(lambda: _check(beat, max_age=1) == 0), "a resumed consumer did not recover"
    finally:
        process.kill()
        process.wait(timeout=10)
