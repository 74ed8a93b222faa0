"""Helpers for the embedded Toxiproxy tests: an echo upstream and socket helpers."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field


@dataclass
class EchoServer:
    """A threaded TCP echo server on loopback. It echoes every byte, records what
    it received per connection, and closes its side once the client half-closes."""

    host: str = "127.0.0.1"
    port: int = 0
    received: list[bytearray] = field(default_factory=list)
    _sock: socket.socket | None = None
    _threads: list[threading.Thread] = field(default_factory=list)
    _conns: list[socket.socket] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)

    def start(self) -> EchoServer:
        self._sock = socket.create_server((self.host, 0), backlog=512)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            buffer = bytearray()
            self.received.append(buffer)
            self._conns.append(conn)
            thread = threading.Thread(target=self._echo, args=(conn, buffer), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _echo(self, conn: socket.socket, buffer: bytearray) -> None:
        conn.settimeout(0.2)
        try:
            while not self._stopping.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                buffer += data
                conn.sendall(data)
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self) -> None:
        self._stopping.set()
        if self._sock is not None:
            self._sock.close()
        for thread in self._threads:
            thread.join(timeout=2)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, count: int, deadline: float = 5.0) -> bytes:
    data = bytearray()
    end = time.monotonic() + deadline
    while len(data) < count and time.monotonic() < end:
        chunk = sock.recv(count - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def recv_until_eof(sock: socket.socket, limit: int = 1 << 24) -> bytes:
    data = bytearray()
    while len(data) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return bytes(data)
