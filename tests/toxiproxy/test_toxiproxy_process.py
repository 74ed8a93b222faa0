"""`python -m harness.toxiproxy` as a supervisor runs it: the ready line, the API,
and a clean exit on SIGTERM that closes every proxy listener; and toxiproxy-server's
flags (`-config`, `-proxy-metrics`, `-runtime-metrics`, `-version`, one or two
dashes), also as `harness toxiproxy serve` parses them."""

from __future__ import annotations

import json
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


def start_module(*args: str) -> tuple[subprocess.Popen[str], str]:
    """`python -m harness.toxiproxy ARGS`, once it announced its API address."""
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.toxiproxy", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.fullmatch(r"toxiproxy listening on (http://127\.0\.0\.1:\d+)\n", line)
    if match is None:
        process.kill()
        process.wait(timeout=5)
        pytest.fail(f"no ready line: {line!r}")
    return process, match.group(1)


def stop_module(process: subprocess.Popen[str]) -> str:
    """SIGTERM, a clean exit, and what the server wrote to stderr."""
    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=5)
    assert process.stderr is not None and process.stdout is not None
    stderr = process.stderr.read()
    process.stderr.close()
    process.stdout.close()
    assert "Traceback" not in stderr
    return stderr


def write_config(path, proxies: list[dict]) -> str:
    path.write_text(json.dumps(proxies))
    return str(path)


def test_config_populates_at_start_with_single_dash_flags(tmp_path) -> None:
    config = write_config(tmp_path / "toxiproxy.json", [
        {"name": "app", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1", "enabled": True},
        {"name": "redis", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:2", "enabled": False},
    ])
    process, url = start_module("-host", "127.0.0.1", "-port", "0", "-config", config, "-proxy-metrics")
    try:
        proxies = requests.get(f"{url}/proxies", timeout=5).json()
        assert sorted(proxies) == ["app", "redis"]
        assert proxies["app"]["enabled"] is True and proxies["redis"]["enabled"] is False
        socket.create_connection(("127.0.0.1", int(proxies["app"]["listen"].rsplit(":", 1)[1])), timeout=2).close()
        assert requests.get(f"{url}/metrics", timeout=5).status_code == 200
    finally:
        stderr = stop_module(process)
    assert "populated 2 proxies" in stderr


def test_double_dash_spellings_and_explicit_booleans(tmp_path) -> None:
    config = write_config(tmp_path / "c.json", [{"name": "one", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:1"}])
    process, url = start_module(
        "--host=127.0.0.1", "--port=0", f"--config={config}", "--runtime-metrics=true", "--proxy-metrics=false"
    )
    try:
        assert list(requests.get(f"{url}/proxies", timeout=5).json()) == ["one"]
        text = requests.get(f"{url}/metrics", timeout=5).text
        assert "process_cpu_seconds_total" in text and "toxiproxy_proxy" not in text
    finally:
        stop_module(process)


def test_a_config_that_cannot_be_read_or_applied_is_reported_and_the_server_runs(tmp_path) -> None:
    for config, message in [
        (str(tmp_path / "missing.json"), "error reading config file"),
        (write_config(tmp_path / "bad.json", [{"name": "x"}]), "missing required field: upstream at proxy 1"),
    ]:
        process, url = start_module("-port", "0", "-config", config)
        try:
            assert requests.get(f"{url}/proxies", timeout=5).json() == {}
        finally:
            stderr = stop_module(process)
        assert message in stderr


def test_version_flag() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "harness.toxiproxy", "-version"], capture_output=True, text=True, timeout=20
    )
    assert (result.returncode, result.stdout) == (0, "toxiproxy-server version 2.12.0\n")


def test_harness_cli_serve_takes_the_same_flags() -> None:
    from harness.cli.main import build_parser

    args = build_parser().parse_args(
        ["toxiproxy", "serve", "-host", "127.0.0.1", "-port", "0", "-config", "c.json", "-proxy-metrics",
         "--runtime-metrics=false"]
    )
    assert (args.toxiproxy_host, args.toxiproxy_port, args.toxiproxy_config) == ("127.0.0.1", 0, "c.json")
    assert (args.toxiproxy_proxy_metrics, args.toxiproxy_runtime_metrics) == (True, False)
    assert args.handler.__name__ == "handle_toxiproxy_serve"
