"""harness.stack.services.Service.wait_port_closed: a restart on the same port waits,
bounded, for the old processes' socket to close (restart_services relies on it)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from harness.ports import free_port
from harness.stack import services as svc


def _service(tmp_path: Path, port: int | None) -> svc.Service:
    return svc.Service(svc.ServiceSpec(name="app", argv=["true"], env={}, log_path=tmp_path / "app.log",
                                       port=port, check=lambda: True))


def test_it_returns_once_the_last_listener_closed(tmp_path: Path) -> None:
    port = free_port()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen()
    closer = threading.Timer(0.3, listener.close)
    closer.start()
    try:
        _service(tmp_path, port).wait_port_closed(10.0)
        assert not svc.port_listening(port)
    finally:
        closer.cancel()
        listener.close()


def test_a_port_still_held_after_the_timeout_is_a_service_error(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        with pytest.raises(svc.ServiceError, match=f"app: port {port} still in use"):
            _service(tmp_path, port).wait_port_closed(0.3)


def test_a_service_without_a_port_has_nothing_to_wait_for(tmp_path: Path) -> None:
    _service(tmp_path, None).wait_port_closed(0.0)
