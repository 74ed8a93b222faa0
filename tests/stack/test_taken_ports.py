"""A stack's port taken by another process between its pick and its bind (issue 35:
"service redis did not come back: redis: port 27139 is already in use", seen with
parallel smoke lanes).

The supervisor holds every port it picked (harness.ports.hold_ports), so no other
picker takes one while its service starts or is down. On the first start a port taken
all the same (a process binding it explicitly) is given up for another; on a restart
the port is known to the stack's clients and stays: the error names it.

The supervisor runs in this process (redis-server, Toxiproxy and gunicorn are real
processes on loopback ports); the neighbours are listening sockets of this test.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis

from harness.ports import bindable, hold_ports
from harness.stack import redis_server
from harness.stack import services as svc
from harness.stack.info import read_info
from harness.stack.settings import StackSettings, write_settings
from harness.stack.supervisor import Supervisor


def neighbour(port: int) -> socket.socket:
    """A server that binds `port` explicitly, as redis-server and gunicorn bind (SO_REUSEADDR)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((svc.HOST, port))
    sock.listen()
    return sock


def picker_gets(port: int) -> bool:
    """Would a neighbour's port picker (a bind without SO_REUSEADDR, as harness.ports and
    most test helpers probe) get `port`?"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((svc.HOST, port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Supervisor, dict[str, int]]]:
    """A supervisor whose Redis, app and Redis-proxy ports each got a neighbour between
    the pick and the start; yields it, started, with the ports it had picked."""
    root = tmp_path_factory.mktemp("stack") / ".harness"
    settings = StackSettings(root=root, app_workers=1, consumers=0, health_timeout=30.0)
    root.mkdir(mode=0o700)
    write_settings(settings)
    supervisor = Supervisor(settings)
    picked = dict(supervisor.ports)
    with ExitStack() as neighbours:
        for key in ("redis", "app", "redis_proxy"):
            neighbours.enter_context(neighbour(picked[key]))
        try:
            supervisor.build()
            supervisor.start_all()
            yield supervisor, picked
        finally:
            supervisor.stop_all()


def test_the_first_start_moves_each_taken_port_to_another_one(started: tuple[Supervisor, dict[str, int]]) -> None:
    supervisor, picked = started
    for key in ("redis", "app", "redis_proxy"):
        assert supervisor.ports[key] != picked[key], key
    for key in ("app_proxy", "toxiproxy"):
        assert supervisor.ports[key] == picked[key], key  # untouched: kept
    info = read_info(supervisor.root)
    assert info.redis_url == f"redis://{svc.HOST}:{supervisor.ports['redis']}/0"
    assert info.redis_proxy_url == f"redis://{svc.HOST}:{supervisor.ports['redis_proxy']}/0"
    assert {service.name: service.port for service in info.services}["redis"] == supervisor.ports["redis"]
    # The app reaches Redis through the moved proxy, and the moved app behind its proxy.
    assert svc.redis_healthy(supervisor.ports["redis_proxy"])
    assert svc.http_healthy(f"{info.app_url}/healthz")
    app_env = supervisor.services["app"].spec.env
    assert app_env["TARGET_APP_REDIS_URL"] == info.redis_proxy_url


def test_a_port_is_held_while_its_service_is_down_and_the_restart_gets_it(
        started: tuple[Supervisor, dict[str, int]]) -> None:
    supervisor, _ = started
    port = supervisor.ports["redis"]
    supervisor.handle({"action": "kill", "service": "redis"})
    assert not svc.port_listening(port)
    assert not picker_gets(port)  # the hold: a neighbour's picker passes it by
    assert supervisor.handle({"action": "start", "service": "redis"})["ok"] is True
    assert supervisor.ports["redis"] == port
    client = redis.Redis(host=svc.HOST, port=port, socket_timeout=5.0)
    try:
        assert client.ping()
    finally:
        client.close()


def test_a_restart_whose_port_was_taken_fails_naming_it(started: tuple[Supervisor, dict[str, int]]) -> None:
    supervisor, _ = started
    port = supervisor.ports["redis"]
    supervisor.handle({"action": "kill", "service": "redis"})
    try:
        with neighbour(port):
            answer = supervisor.handle({"action": "start", "service": "redis"})
        assert answer["ok"] is False
        assert f"port {port} is already in use" in str(answer["error"])
        assert "cannot move" in str(answer["error"])
        assert supervisor.ports["redis"] == port
    finally:
        assert supervisor.handle({"action": "start", "service": "redis"})["ok"] is True


def test_a_hold_keeps_pickers_off_and_lets_a_reuseaddr_server_in() -> None:
    (hold,) = hold_ports(1)
    try:
        assert not picker_gets(hold.port)
        assert bindable(hold.port)
        with neighbour(hold.port):
            assert not bindable(hold.port)
    finally:
        hold.close()
    assert picker_gets(hold.port)


def test_a_redis_server_whose_picked_port_was_taken_starts_on_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tests' own redis-server (conftest's redis_server): the picker's first port is
    taken before redis-server binds it."""
    with socket.socket() as probe:
        probe.bind((svc.HOST, 0))
        taken = int(probe.getsockname()[1])
    picks = iter([taken])
    real_free_port = redis_server.free_port
    monkeypatch.setattr(redis_server, "free_port", lambda host: next(picks, None) or real_free_port(host))
    with neighbour(taken):
        server = redis_server.RedisServer(data_dir=tmp_path / "redis", appendonly=False)
        server.start(timeout=5.0)
        try:
            assert server.port != taken
            assert svc.redis_healthy(server.port)
        finally:
            server.stop()


def test_a_redis_server_given_its_port_keeps_it_and_says_so(tmp_path: Path) -> None:
    (taken,) = hold_ports(1)
    taken.close()
    with neighbour(taken.port):
        server = redis_server.RedisServer(data_dir=tmp_path / "redis", port=taken.port, appendonly=False)
        with pytest.raises(redis_server.RedisServerError, match=f"port {taken.port}"):
            server.start(timeout=2.0)
