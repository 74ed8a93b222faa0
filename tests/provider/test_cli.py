"""`harness provider serve`: bad input is one line and exit 2 before anything listens; a real
run in a subprocess answers the SDK, and SIGTERM stops it cleanly (exit 0) with the ledger
written to --ledger."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import stripe

from harness.cli.main import main
from harness.provider.records import ChargeRecord, read_ledger
from tests.provider.conftest import KEY


@pytest.mark.parametrize(("argv", "says"), [
    (["--port", "99999"], "out of range"),
    (["--port", "http"], "invalid port"),
    (["--seed", "x"], "--seed"),
    (["--webhook", "http://127.0.0.1:9/hook"], "--webhook-secret"),
    (["--webhook", "ftp://x", "--webhook-secret", "whsec_1"], "http(s) URL"),
    (["--ledger", "/nonexistent-dir/ledger.ndjson", "--port", "0"], "is not a directory"),
    (["--idempotency-ttl", "0"], "--idempotency-ttl"),
    (["--idempotency-ttl", "soon"], "--idempotency-ttl"),
    (["--api-key", "sk_live_123456789"], "test key"),
    (["--webhook-kinds", "first,retry"], "webhook delivery kinds"),
    (["--webhook-kinds", ","], "webhook delivery kinds"),
    (["--colour", "red"], "unrecognized arguments"),
])
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    assert main(["provider", "serve", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: ") and says in lines[0], captured.err
    assert captured.out == ""


def test_a_port_in_use_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["provider", "serve", "--port", str(port)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0]


@pytest.mark.slow  # a subprocess importing the whole CLI: a few seconds
def test_serve_answers_the_sdk_and_writes_the_ledger_on_sigterm(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.ndjson"
    process = subprocess.Popen([sys.executable, "-m", "harness", "provider", "serve", "--port", "0", "--seed", "3",
                                "--ledger", str(ledger)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("provider listening on http://127.0.0.1:"), line
        url = line.split()[3]
        client = stripe.StripeClient(KEY, base_addresses={"api": url}, max_network_retries=0)
        intent = client.v1.payment_intents.create(params={"amount": 4200, "currency": "eur", "confirm": True,
                                                          "payment_method": "pm_card_visa",
                                                          "metadata": {"order_id": "cli-1"}})
        assert intent.status == "succeeded"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    [charge] = [r for r in read_ledger(ledger) if isinstance(r, ChargeRecord)]
    assert charge.amount == 4200 and dict(charge.metadata) == {"order_id": "cli-1"} and charge.state == "succeeded"


# The kernel's choice of thread for a signal, made by hand: the server's thread gets it.
# A main thread blocked for good would run the handler only when the second signal,
# sent to it directly 10 s later, woke it.
SIGNAL_TO_THE_SERVER_THREAD = """
import signal, threading, time
from harness.provider.server import ProviderConfig, serve_forever

def stop(signum, frame):
    raise KeyboardInterrupt

signal.signal(signal.SIGTERM, stop)
late = []

def kick():
    for _ in range(600):
        server = [t for t in threading.enumerate() if t.name == "payment-provider"]
        if server:
            break
        time.sleep(0.05)
    signal.pthread_kill(server[0].ident, signal.SIGTERM)
    time.sleep(10)
    late.append("still serving 10 s after the signal")
    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)

threading.Thread(target=kick, daemon=True).start()
print("RESULT", serve_forever(ProviderConfig()), late, flush=True)
"""


@pytest.mark.slow  # a subprocess
def test_serve_stops_on_a_signal_the_kernel_gave_its_server_thread() -> None:
    result = subprocess.run([sys.executable, "-c", SIGNAL_TO_THE_SERVER_THREAD], capture_output=True, text=True,
                            timeout=60)
    assert "RESULT 0 []" in result.stdout, result.stdout + result.stderr[-2000:]
