"""Embedded Toxiproxy: proxied (no toxics) versus direct, a naive forwarder and, when
installed, the real Go toxiproxy-server, side by side in one run.

    .venv/bin/python benchmarks/bench_toxiproxy.py [--duration 5] [--bulk-mib 256]

Starts, each in its own process: a tiny uvloop HTTP responder, a raw TCP byte
sink, the embedded Toxiproxy (`python -m harness.toxiproxy`, as users run it), a
naive 40-line asyncio forwarder, once on uvloop and once on asyncio's own loop,
and `toxiproxy-server` when it is on PATH (otherwise that column is left out and
the run says so). wrk measures small (/small) and 64 KiB (/big) responses; the
bulk figure is a raw TCP transfer sender -> sink. Then the same again with toxics
present but not firing (toxicity 0, and another stream) on the embedded server.
All targets alternate within every round. Prints Markdown tables.

Why the naive forwarder: the goal's reference figures (issue 3) were measured with
a slower backend, so a ratio to our direct baseline is not comparable to them. The
issue calibrates the Go Toxiproxy against the same kind of naive forwarder (plain
asyncio about the Go request rate, uvloop about 13% above it; in bulk 365 and
480 MB/s against Go's 540), so "embedded vs naive" measured here, on the same
backend in the same rounds, is the like-for-like stand-in for "embedded vs Go".
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
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

# The sender announces the byte count in an 8-byte header and the sink answers once
# it has them all: no half-close, which Toxiproxy turns into a full close (so an
# answer sent after EOF would never reach the sender through the Go server).
BYTE_SINK = r"""
import socket
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
while True:
    conn, _ = server.accept()
    header = b""
    while len(header) < 8:
        data = conn.recv(8 - len(header))
        if not data:
            break
        header += data
    expected = int.from_bytes(header, "big") if len(header) == 8 else 0
    total = 0
    while total < expected:
        data = conn.recv(min(1 << 20, expected - total))
        if not data:
            break
        total += len(data)
    conn.sendall(str(total).encode())
    conn.close()
"""

# The reference forwarder: deliberately naive, one read -> write + drain loop per
# direction. argv: upstream port, then "uvloop" or "asyncio" (the loop to run on).
NAIVE_FORWARDER = r"""
import asyncio, sys
UPSTREAM = int(sys.argv[1])
async def pump(reader, writer, source):
    # source is the writer of the connection that reader reads from.
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        # Pass the half-close on, as a forwarder should.
        # (uvloop raises on write_eof once the peer has gone, hence is_closing.)
        if writer.can_write_eof() and not writer.is_closing():
            writer.write_eof()
    except OSError:
        # A reset on either side: close both connections, or the other pump could
        # wait forever on a connection nobody reads any more.
        writer.close()
        source.close()
async def handle(client_reader, client_writer):
    try:
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", UPSTREAM)
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(
        pump(client_reader, upstream_writer, client_writer),
        pump(upstream_reader, client_writer, upstream_writer),
    )
    client_writer.close()
    upstream_writer.close()
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Future()
if sys.argv[2] == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
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
        capture_output=True, text=True, check=True, timeout=duration + 30,
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
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        # The timeout bounds every send and the wait for the sink's answer.
        started = time.perf_counter()
        sock.sendall((mib << 20).to_bytes(8, "big"))
        for _ in range(mib):
            sock.sendall(block)
        answer = sock.recv(64)
        elapsed = time.perf_counter() - started
    if int(answer) != mib << 20:
        raise RuntimeError(f"sink counted {answer!r}, sent {mib << 20}")
    return (mib << 20) / elapsed / 1e6


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_go_server() -> tuple[subprocess.Popen[str], int] | None:
    """The real toxiproxy-server on a free loopback port, or None when it is not
    installed. It logs no port of its own choosing, so the port is picked here."""
    binary = shutil.which("toxiproxy-server")
    if binary is None:
        return None
    port = free_port()
    process = subprocess.Popen(
        [binary, "-host", "127.0.0.1", "-port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/version", timeout=1).ok:
                return process, port
        except requests.RequestException:
            pass
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.terminate()
    process.wait(timeout=10)
    raise RuntimeError(f"{binary} did not answer on port {port}")


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


# Workloads for wrk: label, path, connections.
WORKLOADS = [("small, 1 conn", "/small", 1), ("small, 16 conns", "/small", 16), ("64 KiB, 16 conns", "/big", 16)]
# The naive forwarder's two variants, by the loop they run on.
NAIVE_LOOPS = ("uvloop", "asyncio")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    parser.add_argument("--bulk-mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs per figure; the median is shown")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (apt-get install wrk)")

    processes: list[subprocess.Popen[str]] = []

    def launch(command: list[str]) -> int:
        # Recorded as soon as it runs, so a later failed start still cleans it up.
        process, port = start(command)
        processes.append(process)
        return port

    try:
        http_port = launch([sys.executable, "-c", HTTP_RESPONDER])
        sink_port = launch([sys.executable, "-c", BYTE_SINK])
        api_port = launch([sys.executable, "-m", "harness.toxiproxy", "-port", "0"])
        go = start_go_server()
        go_http = go_sink = None
        if go is not None:
            processes.append(go[0])
            go_api = f"http://127.0.0.1:{go[1]}"
            go_http, go_sink = proxy(go_api, "http", http_port), proxy(go_api, "sink", sink_port)
        # One forwarder process per upstream and loop, like one Go proxy per upstream.
        naive_http = {loop: launch([sys.executable, "-c", NAIVE_FORWARDER, str(http_port), loop]) for loop in NAIVE_LOOPS}
        naive_sink = {loop: launch([sys.executable, "-c", NAIVE_FORWARDER, str(sink_port), loop]) for loop in NAIVE_LOOPS}
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

        # All targets alternate within each round, so a noisy neighbour hurts them alike.
        http_targets = {"direct": http_port, "embedded": http_proxy} | {f"naive {loop}": naive_http[loop] for loop in NAIVE_LOOPS}
        if go_http is not None:
            http_targets["go"] = go_http
        rows: list[tuple[str, dict[str, dict[str, float]]]] = []
        for label, path, conns in WORKLOADS:
            targets = dict(http_targets)
            if path == "/small" and conns == 16:
                targets["idle toxics"] = http_idle
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
            for _ in range(args.repeats):
                for name, port in targets.items():
                    runs[name].append(wrk(f"http://127.0.0.1:{port}{path}", conns, args.duration))
            rows.append((label, {name: median_run(r) for name, r in runs.items()}))

        sink_targets = {"direct": sink_port, "embedded": sink_proxy, "idle toxics": sink_idle, "other stream": sink_other}
        sink_targets |= {f"naive {loop}": naive_sink[loop] for loop in NAIVE_LOOPS}
        if go_sink is not None:
            sink_targets["go"] = go_sink
        bulk_runs: dict[str, list[float]] = {name: [] for name in sink_targets}
        for _ in range(args.repeats):
            for name, port in sink_targets.items():
                bulk_runs[name].append(bulk(port, args.bulk_mib))
        rates = {name: statistics.median(r) for name, r in bulk_runs.items()}

        # The references the embedded server is compared with: the naive forwarders
        # and, when installed, the Go server itself.
        naive = [f"naive {loop}" for loop in NAIVE_LOOPS] + (["go"] if go is not None else [])
        print("toxiproxy-server: " + ("on PATH, measured as `go`" if go is not None
                                      else "not on PATH, no Go column (install it to compare)"))
        print()
        print(
            "| workload | direct req/s | embedded req/s | " + " | ".join(f"{n} req/s" for n in naive)
            + " | embedded/direct | " + " | ".join(f"{n}/direct" for n in naive)
            + " | " + " | ".join(f"embedded/{n}" for n in naive) + " |"
        )
        print("|---" + "|---:" * (3 + 3 * len(naive)) + "|")
        for label, medians in rows:
            direct, embedded = medians["direct"]["rps"], medians["embedded"]["rps"]
            cells = [f"{direct:,.0f}", f"{embedded:,.0f}", *(f"{medians[n]['rps']:,.0f}" for n in naive)]
            cells += [f"{embedded / direct:.0%}", *(f"{medians[n]['rps'] / direct:.0%}" for n in naive)]
            cells += [f"{embedded / medians[n]['rps']:.2f}×" for n in naive]
            print(f"| {label} | " + " | ".join(cells) + " |")
        # The idle-toxics proxy ran in the small, 16 conns rounds; compare it to that row.
        small16 = rows[1][1]
        idle, direct = small16["idle toxics"]["rps"], small16["direct"]["rps"]
        cells = [f"{direct:,.0f}", f"{idle:,.0f}", *("–" for _ in naive), f"{idle / direct:.0%}", *("–" for _ in naive)]
        cells += [f"{idle / small16[n]['rps']:.2f}×" for n in naive]
        print("| small, 16 conns, toxicity-0 toxics on both streams (embedded) | " + " | ".join(cells) + " |")
        print()
        print("| workload, p50 / p99 ms | direct | embedded | " + " | ".join(naive) + " |")
        print("|---" + "|---:" * (2 + len(naive)) + "|")
        for label, medians in rows:
            print(f"| {label} | " + " | ".join(
                f"{medians[name]['p50']:.2f} / {medians[name]['p99']:.2f}" for name in ["direct", "embedded", *naive]
            ) + " |")
        idle_run = small16["idle toxics"]
        print(f"| small, 16 conns, toxicity-0 toxics (embedded) | – | {idle_run['p50']:.2f} / {idle_run['p99']:.2f} |"
              + " – |" * len(naive))
        print()
        print(f"(median of {args.repeats} interleaved runs; wrk -t1, {args.duration:g} s each)")
        print()
        print(f"| bulk, {args.bulk_mib} MiB | MB/s | of direct | embedded (no toxics) / this |")
        print("|---|---:|---:|---:|")
        for name, label in [
            ("direct", "direct"),
            ("embedded", "embedded, no toxics"),
            ("idle toxics", "embedded, toxicity-0 toxics on both streams"),
            ("other stream", "embedded, firing latency on the other stream"),
            *((n, "Go toxiproxy-server" if n == "go" else f"{n} forwarder") for n in naive),
        ]:
            versus = f"{rates['embedded'] / rates[name]:.2f}×" if name in naive else "–"
            print(f"| {label} | {rates[name]:,.0f} | {rates[name] / rates['direct']:.0%} | {versus} |")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


if __name__ == "__main__":
    main()
