"""Locust master and workers in separate processes that talk over TCP on 127.0.0.1, as
if on different machines: each worker is its own `harness worker` process; the
histories reach the master through Locust's messaging, one file per worker in the
master's directory, and nothing is lost at stop. Then `harness run` with local
`--workers` and with a `--remote-workers` slot that a `harness worker` fills, each to
a verdict on a stack left by `harness up`."""

from __future__ import annotations

import itertools
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.check.checker import CheckResult
from harness.load.settings import RUN_TIME_FLAG
from harness.ports import free_port, free_ports
from tests.load.locust_run import LOCUSTFILES, completions, json_requests, records
from tests.load.test_recording import CLIENT_TIMEOUT, _StubApp
from tests.support.cli import clean_env, run_harness, start_harness


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


def stop_all(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(10)


# Two ways a master stops: a headless --run-time end (the master asks each worker for
# its final batch before it quits) and the web UI's stop (`--autostart`: Locust sends
# `stop` to the workers, which send their final batch before reporting stopped).
# Seconds of load. 3 were enough on an idle machine (182 records a worker); in a suite
# of six workers on two cores both workers once recorded nothing in them.
# Timed as the harness times a load (harness.load.run_time: from the workers' users
# running): Locust's own -t starts before the spawn messages go out, and a suite run on a
# busy machine recorded nothing in 10 s of it (the workers took their spawn up too late).
LOAD_SECONDS = 10
STOPS = {"headless": ["--headless"],
         # After a stop each worker sleeps --stop-timeout before it reads messages again:
         # a quit sent sooner is lost with the exiting master (Locust's behaviour).
         "web-ui-stop": ["--autostart", "--autoquit", "7", "--web-host", "127.0.0.1"]}


@pytest.mark.slow
@pytest.mark.parametrize("stop", sorted(STOPS))
def test_workers_in_their_own_processes_send_every_record_to_the_master(stub_url: str, tmp_path: Path,
                                                                        stop: str) -> None:
    port, web_port = free_ports(2)
    history = tmp_path / "histories"
    stop_args = [*STOPS[stop], *(["--web-port", str(web_port)] if stop == "web-ui-stop" else [])]
    # Headless, timed as the harness times a load; the web UI's autostart keeps Locust's -t.
    run_time = ["-t", f"{LOAD_SECONDS}s"] if stop == "web-ui-stop" else [RUN_TIME_FLAG, str(LOAD_SECONDS)]
    # The master's settings reach the workers through Locust: the workers get none.
    master_out, master_log = tmp_path / "master.json", tmp_path / "master.log"
    with open(master_out, "w") as out_file, open(master_log, "w") as log_file:
        master = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", str(LOCUSTFILES / "timeout_replay.py"), "--master",
             "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port), "--expect-workers", "2",
             "--expect-workers-max-wait", "60", *stop_args, "-u", "4", "-r", "4", *run_time,
             "--stop-timeout", "5", "--host", stub_url, "--only-summary", "--exit-code-on-error", "0",
             "--json", "--harness-root", "", "--harness-history-dir", str(history),
             "--harness-request-timeout", str(CLIENT_TIMEOUT), "--harness-seed", "4"],
            cwd=tmp_path, env=clean_env(), stdout=out_file, stderr=log_file, text=True)
    logs = [tmp_path / f"worker-{n}.log" for n in range(2)]
    workers = []
    for log in logs:  # files, not pipes nobody reads while waiting
        with open(log, "w") as handle:
            workers.append(start_harness(
                "worker", "timeout_replay", "--master", f"127.0.0.1:{port}",
                cwd=tmp_path, env=clean_env(HARNESS_ROOT=""), stdout=handle, stderr=subprocess.STDOUT))

    def everything_logged() -> str:
        return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
                         for path in (master_log, *logs))

    try:
        master.wait(timeout=120)
        worker_codes = [w.wait(timeout=30) for w in workers]
    except subprocess.TimeoutExpired as error:
        raise AssertionError(f"{error}\n{everything_logged()}") from None
    finally:
        stop_all([master, *workers])
    out, err = master_out.read_text(), master_log.read_text()
    assert master.returncode == 0, everything_logged()
    assert worker_codes == [0, 0], everything_logged()

    files = sorted(history.glob("*.jsonl"))
    # One file per worker process, named after it (`harness worker` execs Locust: same pid).
    assert sorted(f.name.split("h")[0] for f in files) == sorted(f"w{w.pid}" for w in workers), \
        (err[-3000:], [log.read_text()[-2000:] for log in logs])
    recorded = records(history)
    # Nothing lost at stop: every record each worker made reached the master, acknowledged.
    sent = [re.search(r"(\d+) history records sent to the master, (\d+) acknowledged", log.read_text())
            for log in logs]
    assert all(sent), [log.read_text()[-2000:] for log in logs]
    assert [int(m.group(1)) for m in sent] == [int(m.group(2)) for m in sent]  # type: ignore[union-attr]
    assert sum(int(m.group(1)) for m in sent) == len(recorded)  # type: ignore[union-attr]
    done = completions(recorded)
    last = {r["process"]: r["op_id"] for r in recorded}
    cut = [r for r in recorded if r["type"] == "invoke" and r["op_id"] not in done]
    # Only a user stopped mid-operation after --stop-timeout leaves an invoke open: its last.
    assert all(last[r["process"]] == r["op_id"] for r in cut) and len(cut) <= 4 * 3
    # Every request Locust counted has its completion (its totals may miss a last report).
    assert len(done) >= json_requests(out) > 0
    assert all(r["process"].startswith(f.name.removesuffix(".jsonl"))
               for f in files for r in records_in(f))
    assert (history / ".load-started").is_file()


MASTER_LOG = "master.log"


def one_worker_run(stub_url: str, tmp_path: Path, *, users: int,
                   run_time: str) -> tuple[subprocess.Popen, subprocess.Popen, Path, Path]:
    """A headless master expecting one `harness worker`, and that worker: (master,
    worker, the worker's log, the history directory); the master logs to MASTER_LOG."""
    port = free_port()
    history = tmp_path / "histories"
    with open(tmp_path / MASTER_LOG, "w") as handle:
        master = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", str(LOCUSTFILES / "timeout_replay.py"), "--master",
             "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port), "--expect-workers", "1",
             "--expect-workers-max-wait", "60", "--headless", "-u", str(users), "-r", str(users), "-t", run_time,
             "--stop-timeout", "5", "--host", stub_url, "--only-summary", "--exit-code-on-error", "0",
             "--harness-root", "", "--harness-history-dir", str(history),
             "--harness-request-timeout", str(CLIENT_TIMEOUT)],
            cwd=tmp_path, env=clean_env(), stdout=subprocess.DEVNULL, stderr=handle)
    log = tmp_path / "worker.log"
    with open(log, "w") as handle:
        worker = start_harness("worker", "timeout_replay", "--master", f"127.0.0.1:{port}",
                               cwd=tmp_path, env=clean_env(), stdout=handle, stderr=subprocess.STDOUT)
    return master, worker, log, history


def wait_for_batches(history: Path, timeout: float = 60.0) -> None:
    """Until the load is on and the worker's batches arrive (bounded)."""
    deadline = time.monotonic() + timeout
    while not list(history.glob("*.jsonl")) and time.monotonic() < deadline:
        time.sleep(0.2)


@pytest.mark.slow
def test_a_worker_stopped_by_sigterm_delivers_its_last_records_first(stub_url: str,
                                                                     tmp_path: Path) -> None:
    master, worker, log, history = one_worker_run(stub_url, tmp_path, users=3, run_time="60s")
    try:
        wait_for_batches(history)
        time.sleep(2)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()[-2000:]
        # The master sees its last worker quit and ends the headless run itself.
        master.wait(timeout=30)
    finally:
        stop_all([master, worker])
    text = log.read_text()
    assert "not acknowledged" not in text and "did not acknowledge" not in text, text[-2000:]
    recorded = records(history)
    # Every record the worker made reached the master's file, each acknowledged.
    match = re.search(r"(\d+) history records sent to the master, (\d+) acknowledged", text)
    assert match, text[-2000:]
    assert int(match.group(1)) == int(match.group(2)) == len(recorded) > 0
    # Operations cut off by the stop (a user killed after --stop-timeout mid-retry) lack
    # their completion; each is the last record of its Jepsen process.
    done = completions(recorded)
    last = {r["process"]: r["op_id"] for r in recorded}
    cut = [r for r in recorded if r["type"] == "invoke" and r["op_id"] not in done]
    assert all(last[r["process"]] == r["op_id"] for r in cut) and len(cut) <= 3 * 3


@pytest.mark.slow
def test_a_worker_starved_for_seconds_is_not_given_up(stub_url: str, tmp_path: Path) -> None:
    """A busy machine starved both workers of a suite's master for 4 s (CI), and Locust
    declares a worker missing after 3 missed heartbeats: the harness's master allows
    WORKER_HEARTBEAT_LIVENESS. The worker is stopped (SIGSTOP) for 7 s under load."""
    master, worker, log, history = one_worker_run(stub_url, tmp_path, users=2, run_time="20s")
    master_log = tmp_path / MASTER_LOG
    try:
        wait_for_batches(history)
        worker.send_signal(signal.SIGSTOP)
        time.sleep(7)
        worker.send_signal(signal.SIGCONT)
        assert master.wait(timeout=90) == 0, master_log.read_text()[-3000:]
        assert worker.wait(timeout=30) == 0, log.read_text()[-2000:]
    finally:
        worker.send_signal(signal.SIGCONT)
        stop_all([master, worker])
    text = master_log.read_text()
    assert "failed to send heartbeat" not in text and "went missing" not in text, text[-3000:]
    match = re.search(r"(\d+) history records sent to the master, (\d+) acknowledged", log.read_text())
    assert match and int(match.group(1)) == int(match.group(2)) == len(records(history)) > 0, log.read_text()


def records_in(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def stack_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    work = tmp_path_factory.mktemp("workers")
    env = clean_env(HARNESS_REGISTRY=str(work / "registry"))
    up = run_harness("up", "--app-workers", "2", "--consumers", "1", cwd=work, env=env, timeout=300)
    assert up.returncode == 0, up.stderr[-2000:]
    try:
        yield work, env
    finally:
        run_harness("down", cwd=work, env=env, timeout=300)


def only_run(runs: Path, before: set[Path]) -> Path:
    (run_dir,) = set(runs.iterdir()) - before
    return run_dir


# These runs prove that workers' records reach the master and make a verdict; a busy
# machine's 4 s of load acknowledged 19 operations (CI), under the default minimum of 20.
FEW_ACKNOWLEDGED = ("--min-acknowledged", "5")


def assert_judged_on_the_workers_records(returncode: int, run_dir: Path, output: str) -> None:
    """The verdict of a run whose records came from its workers: PASS (exit 0), or
    INCONCLUSIVE (exit 3) only because a promised path went unexercised (a busy machine's
    4 s of load once made 83 operations, none of them a tenant attempt), never for too
    few acknowledged operations; either way nothing violated and at least 5
    acknowledged, so the records did reach the master."""
    result = CheckResult.from_dict(json.loads((run_dir / "result.json").read_text()))
    assert (returncode, result.verdict) in ((0, "pass"), (3, "inconclusive")), output
    assert result.failed == [], output
    assert all(reason.startswith("promised path ") for reason in result.inconclusive_reasons), output
    assert result.jepsen["acknowledged"] >= 5, output


@pytest.mark.slow
def test_harness_run_with_local_workers_reaches_a_verdict(stack_dir: tuple[Path, dict[str, str]]) -> None:
    work, env = stack_dir
    runs = work / "runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    result = run_harness("run", "mixed", "--workers", "2", "--users", "4", "--duration", "4s",
                         *FEW_ACKNOWLEDGED, cwd=work, env=env, timeout=300)
    run_dir = only_run(runs, before)
    assert_judged_on_the_workers_records(result.returncode, run_dir, result.stdout + result.stderr[-3000:])
    assert len(list((run_dir / "histories").glob("*.jsonl"))) == 2


@pytest.mark.slow
def test_a_remote_worker_joins_a_run_over_tcp(stack_dir: tuple[Path, dict[str, str]]) -> None:
    work, env = stack_dir
    runs = work / "runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    port = free_port()
    run = start_harness(
        "run", "timeout_replay", "--workers", "0", "--remote-workers", "1",
        "--master-bind", f"127.0.0.1:{port}", "--workers-wait", "60s", "--users", "4",
        "--duration", "4s", *FEW_ACKNOWLEDGED, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # Another "machine": its own directory, no stack, no settings but the master's address.
    elsewhere = work / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    with open(work / "worker.log", "w") as log:
        worker = start_harness("worker", "timeout_replay", "--master", f"127.0.0.1:{port}",
                               cwd=elsewhere, env=clean_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        out, err = run.communicate(timeout=180)
        worker.wait(timeout=30)
    finally:
        stop_all([run, worker])
    assert "waiting for 1 remote worker(s)" in err
    run_dir = only_run(runs, before)
    assert_judged_on_the_workers_records(run.returncode, run_dir, out + err[-3000:])
    (history,) = (run_dir / "histories").glob("*.jsonl")
    assert history.name.startswith(f"w{worker.pid}h")  # the remote worker's records, on the master
    assert not list(elsewhere.rglob("*.jsonl"))  # and nothing written where the worker ran
