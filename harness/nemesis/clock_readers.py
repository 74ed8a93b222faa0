"""Reading a process's clock as the process itself shows it, to verify a clock fault.

`date_header_reader(url)`: the `Date` header of an HTTP GET (1 s resolution);
`redis_time_reader(host:port)`: a Redis server's `TIME` (RESP written by hand: one
command needs no client); `postgres_time_reader(dsn)`: PostgreSQL's `clock_timestamp()`
(psycopg, imported when read). Each returns a `ClockReader`, a call that gives one
`ClockReading` (harness.nemesis.fake_clock) or raises NemesisError saying why the
clock could not be read.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime

import requests

from harness.nemesis.fake_clock import ClockReading
from harness.nemesis.toxiproxy_client import NemesisError

READ_TIMEOUT = 2.0
ClockReader = Callable[[], ClockReading]


def date_header_reader(url: str) -> ClockReader:
    """The service's clock from the `Date` header of GET `url` (1 s resolution)."""

    def read() -> ClockReading:
        before = time.time()
        try:
            answer = requests.get(url, timeout=READ_TIMEOUT)
        except requests.RequestException as error:
            raise NemesisError(f"GET {url} for its Date header failed: {error}") from None
        after = time.time()
        header = answer.headers.get("Date")
        if not header:
            raise NemesisError(f"GET {url} answered without a Date header, so the service's clock cannot be "
                               "read (send one to verify a clock fault)")
        try:
            moment = parsedate_to_datetime(header).timestamp()
        except (TypeError, ValueError):
            raise NemesisError(f"GET {url}: its Date header {header!r} is not an HTTP date") from None
        # A Date header truncates to the second: its middle is half a second later.
        return ClockReading(clock=moment + 0.5, real=(before + after) / 2, resolution=1.0)

    return read


def redis_time_reader(address: str) -> ClockReader:
    """A Redis server's clock from its `TIME` command (microseconds), over RESP by hand
    so that no client library is needed for one command."""
    host, _, port = address.rpartition(":")

    def read() -> ClockReading:
        before = time.time()
        try:
            with socket.create_connection((host, int(port)), timeout=READ_TIMEOUT) as connection:
                connection.sendall(b"*1\r\n$4\r\nTIME\r\n")
                data = b""
                while data.count(b"\r\n") < 5:
                    chunk = connection.recv(256)
                    if not chunk:
                        break
                    data += chunk
        except OSError as error:
            raise NemesisError(f"TIME on Redis at {address} failed: {error}") from None
        after = time.time()
        lines = data.split(b"\r\n")
        try:
            seconds, micros = int(lines[2]), int(lines[4])
        except (IndexError, ValueError):
            raise NemesisError(f"TIME on Redis at {address} answered {data[:80]!r}") from None
        return ClockReading(clock=seconds + micros / 1e6, real=(before + after) / 2, resolution=0.01)

    return read


def postgres_time_reader(dsn: str) -> ClockReader:
    """A PostgreSQL server's clock from `clock_timestamp()` (the backend's own clock,
    not the transaction's start), over a connection of its own per reading."""

    def read() -> ClockReading:
        import psycopg

        before = time.time()
        try:
            with psycopg.connect(dsn, connect_timeout=int(READ_TIMEOUT) + 1) as connection:
                row = connection.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        except psycopg.Error as error:
            raise NemesisError(f"clock_timestamp() on PostgreSQL at {dsn} failed: {error}") from None
        after = time.time()
        if row is None:
            raise NemesisError(f"clock_timestamp() on PostgreSQL at {dsn} answered nothing")
        return ClockReading(clock=float(row[0]), real=(before + after) / 2, resolution=0.01)

    return read
