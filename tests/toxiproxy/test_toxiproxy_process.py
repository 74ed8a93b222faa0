"""`python -m harness.toxiproxy` as a supervisor runs it: the ready line, the API,
and a clean exit on SIGTERM that closes every proxy listener."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys

import pytest
import requests


def test_module_serves_announces_port_and_stops_on_sigterm() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.toxiproxy", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.fullmatch(r"toxiproxy listening on http://127\.0\.0\.1:(\d+)\n", line)
        assert match, line
        url = f"http://127.0.0.1:{match.group(1)}"
        body = {"name": "p", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1"}
        listen = requests.post(f"{url}/proxies", json=body, timeout=5).json()["listen"]
        proxy_port = int(listen.rsplit(":", 1)[1])
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert process.stderr is not None and "Traceback" not in process.stderr.read()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", proxy_port), timeout=2).close()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def test_module_reports_a_busy_api_port() -> None:
    blocker = socket.create_server(("127.0.0.1", 0))
    try:
        port = blocker.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "harness.toxiproxy", "--port", str(port)],
            capture_output=True, text=True, timeout=20,
        )
    finally:
        blocker.close()
    assert result.returncode == 1
    assert "address already in use" in result.stderr.lower()
    assert "Traceback" not in result.stderr
