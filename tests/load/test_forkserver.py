"""The Locust fork server (harness.load.forkserver): a real server process forks real
Locust runs of a tiny locustfile. Each run gets exactly the environment, working
directory and log it was given, leads a process group of its own that the client can
signal, reports its exit code like a Popen, and nothing outlives the server or the
process that started it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.load.forkserver import (
    Exited,
    Forked,
    ForkServerError,
    LocustForkServer,
    Refused,
    RunRequest,
    fork_locust,
    message_line,
    parse_message,
)
from harness.process_handle import group_alive, pid_alive

REPO = Path(__file__).resolve().parents[2]

LOCUSTFILE = textwrap.dedent('''
    import json, os
    from locust import User, constant, task

    with open(os.environ["PROBE_OUT"], "w") as out:  # what this run was given
        json.dump({"env": dict(os.environ), "cwd": os.getcwd()}, out)

    class Idle(User):
        wait_time = constant(0.05)

        @task
        def nothing(self):
            pass
''')


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocustForkServer]:
    with LocustForkServer(tmp_path / "server") as started:
        yield started


def _argv(locustfile: Path, seconds: str) -> list[str]:
    return ["-f", str(locustfile), "--headless", "-u", "1", "-r", "1", "-t", seconds,
            "--host", "http://127.0.0.1:9", "--only-summary"]


def _wait_gone(pids: list[int], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(pid_alive(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def test_a_forked_run_gets_its_own_environment_directory_and_log(server: LocustForkServer,
                                                                   tmp_path: Path) -> None:
    locustfile = tmp_path / "idle.py"
    locustfile.write_text(LOCUSTFILE)
    work = tmp_path / "work"
    work.mkdir()
    out, log = tmp_path / "given.json", tmp_path / "run.log"
    env = {"PATH": os.environ["PATH"], "PROBE_OUT": str(out), "ONLY_HERE": "1"}
    child = fork_locust(server.socket_path, _argv(locustfile, "1s"), env=env, cwd=work, log_path=log)
    assert child.poll() is None and pid_alive(child.pid)
    assert child.wait(timeout=60) == 0
    given = json.loads(out.read_text())
    assert given["env"] == env  # the request's environment, nothing of the server's
    assert given["cwd"] == str(work)
    assert "Starting Locust" in log.read_text()
    assert child.returncode == 0 and child.poll() == 0


def test_a_run_leads_its_own_group_and_reports_the_signal_that_ended_it(server: LocustForkServer,
                                                                        tmp_path: Path) -> None:
    locustfile = tmp_path / "idle.py"
    locustfile.write_text(LOCUSTFILE)
    env = {"PATH": os.environ["PATH"], "PROBE_OUT": str(tmp_path / "given.json")}
    child = fork_locust(server.socket_path, _argv(locustfile, "60s"), env=env, cwd=tmp_path,
                        log_path=tmp_path / "run.log")
    assert os.getpgid(child.pid) == child.pid  # signalled as a group, as LocustProcess.stop does
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.5)
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL
    assert not group_alive(child.pid)


def test_two_runs_side_by_side_each_get_their_own_exit_code(server: LocustForkServer, tmp_path: Path) -> None:
    locustfile = tmp_path / "idle.py"
    locustfile.write_text(LOCUSTFILE)
    env = {"PATH": os.environ["PATH"], "PROBE_OUT": str(tmp_path / "given.json")}
    good = fork_locust(server.socket_path, _argv(locustfile, "1s"), env=env, cwd=tmp_path,
                       log_path=tmp_path / "good.log")
    bad = fork_locust(server.socket_path, ["-f", str(tmp_path / "missing.py"), "--headless"], env=env,
                      cwd=tmp_path, log_path=tmp_path / "bad.log")
    assert bad.wait(timeout=60) != 0
    assert good.wait(timeout=60) == 0
    assert good.pid != bad.pid


def test_the_protocol_s_records_survive_their_lines() -> None:
    request = RunRequest(argv=("-f", "x.py"), env={"PATH": "/bin"}, cwd="/tmp", log="/tmp/run.log")
    assert RunRequest.from_line(request.to_line()) == request
    for message in (Forked(42), Exited(-9), Refused("bad request: no argv")):
        assert parse_message(message_line(message)) == message


@pytest.mark.parametrize("line", [b'{"argv": "not a list", "env": {}, "cwd": "/", "log": "l"}',
                                  b'{"argv": [], "env": {}, "cwd": "/"}', b"[1, 2]", b"not json"])
def test_a_bad_request_line_is_a_value_error(line: bytes) -> None:
    with pytest.raises(ValueError):
        RunRequest.from_line(line)


@pytest.mark.parametrize("line", [b'{"pid": "x"}', b'{"other": 1}', b"[]", b"not json"])
def test_a_bad_server_line_is_a_value_error(line: bytes) -> None:
    with pytest.raises(ValueError, match="not a fork server message"):
        parse_message(line)


def test_a_bad_request_is_an_error_and_the_server_goes_on(server: LocustForkServer, tmp_path: Path) -> None:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(str(server.socket_path))
        connection.sendall(b'{"argv": "not a request"}\n')
        reply = json.loads(connection.makefile().readline())
    assert "bad request" in reply["error"]
    locustfile = tmp_path / "idle.py"
    locustfile.write_text(LOCUSTFILE)
    child = fork_locust(server.socket_path, _argv(locustfile, "1s"),
                        env={"PATH": os.environ["PATH"], "PROBE_OUT": str(tmp_path / "g.json")},
                        cwd=tmp_path, log_path=tmp_path / "run.log")
    assert child.wait(timeout=60) == 0


def test_no_server_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ForkServerError, match="did not fork a run"):
        fork_locust(tmp_path / "no.sock", ["--version"], env={}, cwd=tmp_path, log_path=tmp_path / "log")


def test_a_server_that_cannot_start_says_where_its_log_is(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # A PYTHONPATH whose `locust` fails to import: the server exits before it listens.
    fake = tmp_path / "fake"
    (fake / "locust").mkdir(parents=True)
    (fake / "locust" / "__init__.py").write_text("raise ImportError('no locust here')\n")
    monkeypatch.setenv("PYTHONPATH", f"{fake}{os.pathsep}{REPO}")
    server = LocustForkServer(tmp_path / "server")
    with pytest.raises(ForkServerError, match="locust-forkserver.log"):
        server.start()
    assert "no locust here" in server.log_path.read_text()


def test_nothing_outlives_a_killed_harness(tmp_path: Path) -> None:
    """The process that started the server dies by SIGKILL while a run is going: the
    server (parent-death SIGTERM) and then its run (the same, from the server) go."""
    locustfile = tmp_path / "idle.py"
    locustfile.write_text(LOCUSTFILE)
    pids = tmp_path / "pids.json"
    script = textwrap.dedent(f'''
        import json, os, sys, time
        from pathlib import Path
        from harness.load.forkserver import LocustForkServer, fork_locust
        server = LocustForkServer(Path({str(tmp_path / "server")!r}))
        server.start()
        child = fork_locust(server.socket_path, {_argv(locustfile, "120s")!r},
                            env={{"PATH": os.environ["PATH"], "PROBE_OUT": {str(tmp_path / "g.json")!r}}},
                            cwd=Path({str(tmp_path)!r}), log_path=Path({str(tmp_path / "run.log")!r}))
        Path({str(pids)!r}).write_text(json.dumps([server._process.pid, child.pid]))
        time.sleep(300)
    ''')
    harness = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not pids.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        started = json.loads(pids.read_text())
        assert all(pid_alive(pid) for pid in started)
        harness.kill()
        harness.wait(timeout=10)
        assert _wait_gone(started), [pid for pid in started if pid_alive(pid)]
    finally:
        harness.kill()
