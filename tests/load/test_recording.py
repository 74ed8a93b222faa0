"""History recording by the load processes: invoke/completion pairing, a new process id
after every `info`, one file per load process, and nothing lost at stop.

The target is a stub HTTP server that answers some requests too late for the
client's timeout and some with a 503, so `info` outcomes are certain.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import pytest

from harness.history import iter_records
from harness.nemesis.toxiproxy_client import Nemesis
from harness.ports import free_port
from harness.toxiproxy.server import EmbeddedToxiproxy
from tests.load.locust_run import completions, records, run_locust

CLIENT_TIMEOUT = 0.3
SLOW_SPAWN_WORKERS = Path(__file__).with_name("slow_spawn_workers.py")


class _StubApp(BaseHTTPRequestHandler):
    counter: Iterator[int]

    def do_POST(self) -> None:  # noqa: N802 - the http.server hook name
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        number = next(self.counter)
        if number % 5 == 0:
            time.sleep(CLIENT_TIMEOUT * 2)  # the answer comes after the client gave up
        if number % 7 == 0:
            self._answer(503, {"title": "unavailable"})
        elif self.path == "/api/v1/orders":
            self._answer(201, {"id": f"ord-{number}", "status": "INVENTORY_RESERVED"})
        else:
            self._answer(200, {"status": "PAID"})

    def _answer(self, status: int, payload: dict[str, str]) -> None:
        body = orjson.dumps(payload)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up first: exactly what the test provokes

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub_url() -> Iterator[str]:
    handler = type("Handler", (_StubApp,), {"counter": itertools.count(1)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.mark.slow
def test_two_processes_record_paired_operations_in_their_own_files(stub_url: str, tmp_path: Path) -> None:
    history = tmp_path / "histories"
    env = {"HARNESS_HISTORY_DIR": str(history), "HARNESS_REQUEST_TIMEOUT": str(CLIENT_TIMEOUT),
           "HARNESS_SEED": "1"}
    requests = run_locust("timeout_replay.py", stub_url, env, users=4, seconds=3, processes=2)

    files = sorted(history.glob("*.jsonl"))
    assert len(files) == 2, f"expected one history per worker process, got {[f.name for f in files]}"
    workers = {path.name.split("-")[0] for path in files}
    assert len(workers) == 2

    recorded = records(history)
    invokes = {r["op_id"]: r for r in recorded if r["type"] == "invoke"}
    done = completions(recorded)
    assert set(done) <= set(invokes), "a completion without its invoke"
    # Only operations cut off by the stop itself may lack a completion: one per user.
    assert len(invokes) - len(done) <= 4 + 4 * 1
    for op_id, completion in done.items():
        assert completion["process"] == invokes[op_id]["process"]
        assert completion["op"] == invokes[op_id]["op"]

    # The master's totals may miss the workers' last report (Locust stops them
    # first), so only a bound here; the single-process test checks equality.
    assert len(done) >= requests > 0
    # Without HARNESS_TOXIPROXY_URL nobody knows whether a toxic was met.
    assert {r["toxic_hit"] for r in done.values()} == {None}


@pytest.mark.slow
def test_a_distributed_load_is_timed_from_its_workers_users(stub_url: str, tmp_path: Path) -> None:
    """The master's --harness-run-time clock waits for the workers' users: workers that
    take their spawn up seconds late (a busy machine's; here slow_spawn_workers.py) still
    get their load, and each records its operations. A clock started at the master's
    own test_start quit before any worker's user ran: no history at all."""
    history = tmp_path / "histories"
    env = {"HARNESS_HISTORY_DIR": str(history), "HARNESS_REQUEST_TIMEOUT": str(CLIENT_TIMEOUT)}
    requests = run_locust(str(SLOW_SPAWN_WORKERS), stub_url, env, users=4, seconds=2, processes=2)

    files = sorted(history.glob("*.jsonl"))
    assert len(files) == 2, f"expected one history per worker process, got {[f.name for f in files]}"
    for path in files:
        assert any(r["type"] != "invoke" for r in iter_records(path)), f"{path.name}: no operation completed"
    assert len(completions(records(history))) >= requests > 0


@pytest.mark.slow
def test_a_process_never_invokes_again_after_info(stub_url: str, tmp_path: Path) -> None:
    history = tmp_path / "histories"
    env = {"HARNESS_HISTORY_DIR": str(history), "HARNESS_REQUEST_TIMEOUT": str(CLIENT_TIMEOUT)}
    requests = run_locust("timeout_replay.py", stub_url, env, users=2, seconds=3)

    recorded = records(history)
    # Nothing buffered is lost at stop: every request Locust counted has its completion.
    assert len(completions(recorded)) == requests
    infos = [r for r in recorded if r["type"] == "info"]
    assert any(r["status"] == 503 for r in infos), "the stub's 503 was not recorded as info"
    assert any(r["status"] is None and "Timeout" in (r["error"] or "") for r in infos)

    outstanding: dict[str, str] = {}
    retired: set[str] = set()
    for record in recorded:  # one file, in write order
        process = record["process"]
        assert process not in retired, f"{process} went on after an info"
        if record["type"] == "invoke":
            assert process not in outstanding, f"{process} has two operations outstanding"
            outstanding[process] = record["op_id"]
            continue
        assert outstanding.pop(process) == record["op_id"]
        if record["type"] == "info":
            retired.add(process)
    incarnations = {r["process"].rsplit("-p", 1)[1] for r in recorded}
    assert len(incarnations) > 1, "no user ever continued as a new process"
    # Every invoke names its tenant; every ok answer is summarised (null where the
    # stub's body says nothing), and the stub's plain-JSON 503 is no problem answer.
    assert all(r["tenant"] for r in recorded if r["type"] == "invoke")
    oks = [r for r in recorded if r["type"] == "ok"]
    assert oks and all(isinstance(r["answer"], dict) for r in oks)
    assert all(r["answer"]["order_id"] == r["order_id"] for r in oks if r["op"] == "create_order")
    assert not any("problem_type" in r for r in infos)
    # Retries after info reuse the key and body, so the fingerprint repeats.
    retries = [r for r in recorded if r.get("expect") == "retry_after_timeout"]
    assert retries
    first_by_key = {}
    for r in recorded:
        if r["type"] == "invoke" and r["op"] == "create_order" and r.get("expect") is None:
            first_by_key.setdefault(r["idempotency_key"], r["fingerprint"])
    assert all(first_by_key.get(r["idempotency_key"], r["fingerprint"]) == r["fingerprint"]
               for r in retries if r["op"] == "create_order")


@pytest.mark.slow
def test_requests_record_whether_a_toxic_was_active(stub_url: str, tmp_path: Path,
                                                     embedded_toxiproxy: EmbeddedToxiproxy) -> None:
    nemesis = Nemesis(embedded_toxiproxy.url)
    proxy = nemesis.ensure_proxy("app", f"127.0.0.1:{free_port()}", stub_url.removeprefix("http://"))
    env = {"HARNESS_REQUEST_TIMEOUT": "1", "HARNESS_TOXIPROXY_URL": embedded_toxiproxy.url}

    with nemesis.toxic("app", "latency", attributes={"latency": 5}):
        run_locust("timeout_replay.py", f"http://{proxy.listen}", {
            **env, "HARNESS_HISTORY_DIR": str(tmp_path / "toxic")}, users=2, seconds=2)
    run_locust("timeout_replay.py", f"http://{proxy.listen}", {
        **env, "HARNESS_HISTORY_DIR": str(tmp_path / "clean")}, users=2, seconds=2)

    def hits(directory: Path) -> set[object]:
        return {r.get("toxic_hit") for r in records(directory) if r["type"] != "invoke"}

    assert hits(tmp_path / "toxic") == {True}
    assert hits(tmp_path / "clean") == {False}
