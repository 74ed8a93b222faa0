"""Embedded Toxiproxy: proxied (no toxics) versus direct, side by side in one run.

    .venv/bin/python benchmarks/bench_toxiproxy.py [--duration 5] [--bulk-mib 256]

Starts, each in its own process: a tiny uvloop HTTP responder, a raw TCP byte
sink, and the embedded Toxiproxy (`python -m harness.toxiproxy`, as users run it).
wrk measures small (/small) and 64 KiB (/big) responses; the bulk figure is a
raw TCP transfer sender -> sink. Then the same again with toxics present but not
firing (toxicity 0, and another stream). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent

# The upstream servers run as `python -c` programs so each is its own process.
HTTP_RESPONDER = r"""
import asyncio, sys
try:
    import uvloop
except ImportError:
    uvloop = None
SMALL = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\nHello, world!"
BIG = b"HTTP/1.1 200 OK\r\nContent-Length: 65536\r\nContent-Type: text/plain\r\n\r\n" + b"x" * 65536
class Responder(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.buffer = b""
    def data_received(self, data):
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            request, self.buffer = self.buffer[:end], self.buffer[end + 4:]
            self.transport.write(BIG if request.startswith(b"GET /big") else SMALL)
async def main():
    server = await asyncio.get_running_loop().create_server(Responder, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Future()
(uvloop.run if uvloop else asyncio.run)(main())
"""

BYTE_SINK = r"""
import socket
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
while True:
    conn, _ = server.accept()
    total = 0
    while True:
        data = conn.recv(1 << 20)
        if not data:
            break
        total += len(data)
    conn.sendall(str(total).encode())
    conn.close()
"""


def start(args: list[str]) -> tuple[subprocess.Popen[str], int]:
    """Start a process that prints its port (possibly inside a line) first."""
    process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert process.stdout is not None
    line = process.stdout.readline()
    match = re.search(r"(\d+)\s*$", line.strip())
    if match is None:
        process.kill()
        raise RuntimeError(f"no port from {args[:3]}: {line!r}")
    return process, int(match.group(1))


def wrk(url: str, connections: int, duration: float) -> dict[str, float]:
    output = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--latency", url],
        capture_output=True, text=True, check=True,
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]

    def percentile(label: str) -> float:
        value, unit = re.search(rf"\s{label}%\s+([\d.]+)(us|ms|s)", output).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    return {"rps": rate, "p50": percentile("50"), "p99": percentile("99")}


def median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """The run with the median request rate (its latencies belong to it)."""
    return sorted(runs, key=lambda run: run["rps"])[len(runs) // 2]


def bulk(port: int, mib: int) -> float:
    """MB/s (10^6 bytes) for `mib` MiB sent through port, counted at the sink."""
    block = os.urandom(1 << 20)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.perf_counter()
        for _ in range(mib):
            sock.sendall(block)
        sock.shutdown(socket.SHUT_WR)
        answer = sock.recv(64)
        elapsed = time.perf_counter() - started
    if int(answer) != mib << 20:
        raise RuntimeError(f"sink counted {answer!r}, sent {mib << 20}")
    return (mib << 20) / elapsed / 1e6


def proxy(api: str, name: str, upstream: int) -> int:
    body = {"name": name, "listen": "127.0.0.1:0", "upstream": f"127.0.0.1:{upstream}"}
    response = requests.post(f"{api}/proxies", json=body, timeout=5)
    response.raise_for_status()
    return int(response.json()["listen"].rsplit(":", 1)[1])


def add_idle_toxics(api: str, name: str) -> None:
    """Toxics that are present but never fire: toxicity 0 on both streams."""
    for stream in ("upstream", "downstream"):
        body = {"type": "latency", "stream": stream, "toxicity": 0.0, "attributes": {"latency": 1000}}
        requests.post(f"{api}/proxies/{name}/toxics", json=body, timeout=5).raise_for_status()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    parser.add_argument("--bulk-mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs per figure; the median is shown")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (apt-get install wrk)")

    processes = []
    try:
        http, http_port = start([sys.executable, "-c", HTTP_RESPONDER])
        sink, sink_port = start([sys.executable, "-c", BYTE_SINK])
        server, api_port = start([sys.executable, "-m", "harness.toxiproxy", "--port", "0"])
        processes = [http, sink, server]
        api = f"http://127.0.0.1:{api_port}"
        http_proxy = proxy(api, "http", http_port)
        sink_proxy = proxy(api, "sink", sink_port)
        http_idle = proxy(api, "http_idle", http_port)
        sink_idle = proxy(api, "sink_idle", sink_port)
        add_idle_toxics(api, "http_idle")
        add_idle_toxics(api, "sink_idle")
        # Another stream: a firing downstream latency while the bulk data flows upstream.
        sink_other = proxy(api, "sink_other", sink_port)
        requests.post(
            f"{api}/proxies/sink_other/toxics",
            json={"type": "latency", "stream": "downstream", "attributes": {"latency": 1}},
            timeout=5,
        ).raise_for_status()

        # Direct and proxied runs alternate, so a noisy neighbour hurts both alike.
        rows = []
        for label, path, conns in [("small, 1 conn", "/small", 1), ("small, 16 conns", "/small", 16), ("64 KiB, 16 conns", "/big", 16)]:
            runs: dict[int, list[dict[str, float]]] = {http_port: [], http_proxy: []}
            if path == "/small" and conns == 16:
                runs[http_idle] = []
            for _ in range(args.repeats):
                for port in runs:
                    runs[port].append(wrk(f"http://127.0.0.1:{port}{path}", conns, args.duration))
            rows.append((label, *(median_run(r) for r in runs.values())))

        bulk_runs: dict[int, list[float]] = {sink_port: [], sink_proxy: [], sink_idle: [], sink_other: []}
        for _ in range(args.repeats):
            for port in bulk_runs:
                bulk_runs[port].append(bulk(port, args.bulk_mib))
        bulk_direct, bulk_proxied, bulk_idle, bulk_other = (statistics.median(r) for r in bulk_runs.values())

        print("| workload | direct req/s | proxy req/s | proxy/direct | direct p50 / p99 ms | proxy p50 / p99 ms |")
        print("|---|---:|---:|---:|---:|---:|")
        for label, direct, proxied, *_ in rows:
            print(
                f"| {label} | {direct['rps']:,.0f} | {proxied['rps']:,.0f} | {proxied['rps'] / direct['rps']:.0%} "
                f"| {direct['p50']:.2f} / {direct['p99']:.2f} | {proxied['p50']:.2f} / {proxied['p99']:.2f} |"
            )
        small16, idle = rows[1][1], rows[1][3]
        print(
            f"| small, 16 conns, toxicity-0 toxics on both streams | {small16['rps']:,.0f} | {idle['rps']:,.0f} "
            f"| {idle['rps'] / small16['rps']:.0%} | {small16['p50']:.2f} / {small16['p99']:.2f} | {idle['p50']:.2f} / {idle['p99']:.2f} |"
        )
        print()
        print(f"(median of {args.repeats} interleaved runs; wrk -t1, {args.duration:g} s each)")
        print()
        print("| bulk, {} MiB | MB/s | of direct |".format(args.bulk_mib))
        print("|---|---:|---:|")
        for label, value in [
            ("direct", bulk_direct),
            ("proxy, no toxics", bulk_proxied),
            ("proxy, toxicity-0 toxics on both streams", bulk_idle),
            ("proxy, firing latency on the other stream", bulk_other),
        ]:
            print(f"| {label} | {value:,.0f} | {value / bulk_direct:.0%} |")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


if __name__ == "__main__":
    main()
