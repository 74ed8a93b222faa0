"""One proxied TCP connection: a client side, an upstream side, and the two
directions between them (upstream = client -> server, downstream = server -> client).

Each direction has a fast path: while none of its toxics fires on this connection
and nothing is queued, `data_received` writes straight into the other transport,
with the usual pause/resume flow control. When a toxic fires, chunks go through a
queue and one task runs them through the chain of behaviours in order.

Byte counts for `/metrics` (only with proxy metrics on): a `CountingSide` counts
what it reads (`received`) and what of it reached the other socket (`sent`).

A proxy with a step watch (`ConnectionOwner.wire`, harness.toxiproxy.steps) puts a
`StepTap` in front of both directions: the sides feed the tap, which parses (the
watch's protocol) and feeds the directions (so no fast path while tapped).
Without one, nothing changes.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol, cast

from harness.toxiproxy.steps import StepTap, StepWatch, owner_pid
from harness.toxiproxy.toxics import Behaviour, Timing, Toxic, new_behaviour

# Bytes a toxic chain may hold before the source is paused (latency holds data).
_QUEUE_HIGH = 1 << 20
_WRITE_HIGH = 1 << 20
_EOF = b""


def _discard(data: bytes) -> None:
    """Feed for a direction that has ended: bytes are read and dropped."""


class Side(asyncio.Protocol):
    """The protocol on either socket; it only forwards events to its Connection."""

    def __init__(self, connection: Connection, is_client: bool) -> None:
        self.connection = connection
        self.is_client = is_client
        self.transport: asyncio.Transport | None = None
        # Until both sides exist, bytes wait here (uvloop may deliver data right
        # after connection_made even when reading was paused there).
        self.early: list[bytes] = []
        self.early_eof = False
        self.feed: Callable[[bytes], None] = self.early.append
        # The other transport's write while its direction is on the fast path;
        # calling it straight from data_received saves a call per chunk.
        self.fast_write: Callable[[bytes], object] | None = None
        # Bytes read from this socket, and bytes of them written to the other one.
        # Only a CountingSide keeps `received` and fast-path `sent` up to date.
        self.received = 0
        self.sent = 0

    @property
    def connected(self) -> asyncio.Transport:
        """This side's transport, which `connection_made` gave it."""
        if self.transport is None:
            raise RuntimeError("this side of the link is not connected yet")
        return self.transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream socket's transport: uvloop's has every method of asyncio.Transport
        # without subclassing it, so it is taken as one rather than checked.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=_WRITE_HIGH)
        # Nothing is read until both sides exist and `feed` is set.
        self.transport.pause_reading()
        if self.is_client:
            self.connection.client_made(self)

    def data_received(self, data: bytes) -> None:
        write = self.fast_write
        if write is not None:
            write(data)
        else:
            self.feed(data)

    def eof_received(self) -> bool:
        if self.feed is _discard:
            pass
        elif self.feed == self.early.append:
            self.early_eof = True
        else:
            self.connection.source_eof(self)
        return True  # keep the other half open: half-closes pass through

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection.side_lost(self)

    def pause_writing(self) -> None:
        self.connection.sink_paused(self, True)

    def resume_writing(self) -> None:
        self.connection.sink_paused(self, False)


class CountingSide(Side):
    """A Side that counts bytes for the proxy metrics. A subclass rather than a
    flag, so the plain fast path carries no counting at all."""

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        write = self.fast_write
        if write is not None:
            self.sent += len(data)
            write(data)
        else:
            self.feed(data)


class Direction:
    """Bytes from one side to the other through this connection's share of a chain."""

    def __init__(self, connection: Connection, source: Side, sink: Side, upstream: bool) -> None:
        self.connection = connection
        self.upstream = upstream
        self.source_side = source
        self.source = source.connected
        self.sink = sink.connected
        self.draws: dict[Toxic, float] = {}
        self.behaviours: dict[Toxic, Behaviour] = {}
        self.active: list[Behaviour] = []
        self.queue: deque[tuple[bytes, float]] = deque()
        self.queued = 0
        self.runner: asyncio.Task[None] | None = None
        self.pause_reasons: set[str] = set()
        self.drained: asyncio.Event | None = None
        self.done = False  # the close was passed on (or the sink is gone)

    # -- toxics -------------------------------------------------------------
    def refresh(self, chain: list[Toxic]) -> None:
        """Match this direction to the proxy's current chain. Toxicity is drawn once
        per toxic per connection, the first time this connection sees the toxic."""
        if self.connection.closed:
            return
        active: list[Behaviour] = []
        seen: set[Toxic] = set()
        for toxic in chain:
            seen.add(toxic)
            draw = self.draws.get(toxic)
            if draw is None:
                draw = self.draws[toxic] = random.random()
            behaviour = self.behaviours.get(toxic)
            if draw < toxic.toxicity:
                if behaviour is None:
                    behaviour = self.behaviours[toxic] = new_behaviour(toxic, self)
                    behaviour.start()
                elif behaviour.revision != toxic.revision:
                    behaviour.revision = toxic.revision
                    behaviour.stop()
                    behaviour.start()
                active.append(behaviour)
            elif behaviour is not None:
                behaviour.stop()
                del self.behaviours[toxic]
        self.active = active
        self.sync_fast_path()
        for toxic in list(self.draws):
            if toxic not in seen:
                del self.draws[toxic]
                gone = self.behaviours.pop(toxic, None)
                if gone is not None:
                    gone.stop()
                    gone.removed()

    def stop(self) -> None:
        for behaviour in self.behaviours.values():
            behaviour.stop()
        self.behaviours.clear()
        self.active = []
        self.queue.clear()
        self.queued = 0
        self.source_side.fast_write = None
        if self.runner is not None and self.runner is not asyncio.current_task():
            self.runner.cancel()

    def sync_fast_path(self) -> None:
        """Let the source write straight into the sink while nothing is in between."""
        side = self.source_side
        idle = self.runner is None and not self.active and not self.done and side.feed == self.feed
        side.fast_write = self.sink.write if idle else None

    # -- data -----------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        if self.runner is None and not self.active:
            self.sink.write(data)  # the fast path
            self.source_side.sent += len(data)
            return
        self.queue.append((data, time.monotonic()))
        self.queued += len(data)
        if self.queued > _QUEUE_HIGH:
            self.pause("queue")
        if self.runner is None:
            self.runner = asyncio.get_running_loop().create_task(self._run())
            self.source_side.fast_write = None

    def feed_eof(self) -> None:
        if self.runner is None and not self.active:
            self._pass_close()
            return
        self.queue.append((_EOF, time.monotonic()))
        if self.runner is None:
            self.runner = asyncio.get_running_loop().create_task(self._run())
            self.source_side.fast_write = None

    async def _run(self) -> None:
        try:
            while self.queue:
                data, arrived = self.queue.popleft()
                if data is _EOF:
                    for behaviour in list(self.active):
                        await behaviour.before_close()
                    self._pass_close()
                    return
                self.queued -= len(data)
                if self.queued <= _QUEUE_HIGH // 2:
                    self.resume("queue")
                await self._through(list(self.active), 0, data, Timing(arrived, arrived))
        except asyncio.CancelledError:
            pass
        finally:
            self.runner = None
            self.sync_fast_path()

    async def _through(self, chain: list[Behaviour], index: int, data: bytes, timing: Timing) -> None:
        if index == len(chain):
            await self._write(data)
            return

        async def emit(piece: bytes, piece_timing: Timing) -> None:
            await self._through(chain, index + 1, piece, piece_timing)

        await chain[index].chunk(data, timing, emit)

    async def _write(self, data: bytes) -> None:
        if self.done or self.sink.is_closing():
            return
        self.sink.write(data)
        self.source_side.sent += len(data)
        if self.drained is not None:
            await self.drained.wait()

    def _pass_close(self) -> None:
        if self.done:
            return
        self.done = True
        sink = self.sink
        if not sink.is_closing():
            if sink.can_write_eof():
                sink.write_eof()
            else:
                sink.close()
        self.connection.direction_done()

    # -- LinkControl for behaviours -------------------------------------------------
    def end_direction(self) -> None:
        """Pass the close on now and drop whatever the source still sends."""
        self.source_side.feed = _discard
        self.source_side.fast_write = None
        self.queue.clear()
        self.queued = 0
        self.resume("queue")
        self._pass_close()

    def close_connection(self) -> None:
        self.connection.close(abort=False)

    def reset_connection(self) -> None:
        self.connection.reset()

    # -- flow control -----------------------------------------------------------
    def pause(self, reason: str) -> None:
        if not self.pause_reasons:
            try:
                self.source.pause_reading()
            except RuntimeError:
                pass  # the source is already closing
        self.pause_reasons.add(reason)

    def resume(self, reason: str) -> None:
        if reason not in self.pause_reasons:
            return
        self.pause_reasons.discard(reason)
        if not self.pause_reasons and not self.source.is_closing():
            try:
                self.source.resume_reading()
            except RuntimeError:
                pass

    def sink_paused(self, paused: bool) -> None:
        if paused:
            self.pause("sink")
            if self.drained is None:
                self.drained = asyncio.Event()
        else:
            self.resume("sink")
            if self.drained is not None:
                self.drained.set()
                self.drained = None


class ToxicChains(Protocol):
    """The toxic chains of a proxy, per direction, in order."""

    @property
    def upstream(self) -> list[Toxic]: ...

    @property
    def downstream(self) -> list[Toxic]: ...


class ConnectionOwner(Protocol):
    """What a connection reads of the proxy that accepted it (harness.toxiproxy.proxy.Proxy
    is one). Declared here, where it is used, so that the proxy imports its
    connections and never the other way round."""

    @property
    def name(self) -> str: ...

    @property
    def listen(self) -> str: ...

    @property
    def upstream(self) -> str: ...

    @property
    def connections(self) -> set[Connection]: ...

    @property
    def side_class(self) -> type[Side]: ...

    @property
    def toxics(self) -> ToxicChains: ...

    @property
    def wire(self) -> StepWatch | None: ...

    def upstream_address(self) -> tuple[str, int]: ...

    def connection_closed(self, connection: Connection) -> None: ...


class Connection:
    """A client connection to a proxy and its upstream connection."""

    def __init__(self, proxy: ConnectionOwner) -> None:
        self.proxy = proxy
        # The metric labels, fixed when the connection opens (as Toxiproxy's link).
        self.listener = proxy.listen
        self.upstream_label = proxy.upstream
        self.client: Side | None = None
        self.server: Side | None = None
        self.up: Direction | None = None
        self.down: Direction | None = None
        self.closed = False
        self.tap: StepTap | None = None
        self._connector: asyncio.Task[None] | None = None

    # -- setup --------------------------------------------------------------------
    def client_made(self, client: Side) -> None:
        self.client = client
        self.proxy.connections.add(self)
        self._connector = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        host, port = self.proxy.upstream_address()
        loop = asyncio.get_running_loop()
        try:
            side_class = self.proxy.side_class
            _, server = await loop.create_connection(lambda: side_class(self, False), host, port)
        except (OSError, ValueError):
            self.close(abort=False)  # Toxiproxy drops the client when upstream is down
            return
        except asyncio.CancelledError:
            self.close(abort=True)
            return
        assert isinstance(server, Side) and self.client is not None
        self.server = server
        if self.closed:
            server.connected.abort()
            return
        self.up = Direction(self, self.client, server, upstream=True)
        self.down = Direction(self, server, self.client, upstream=False)
        self.refresh()
        watch = self.proxy.wire
        if watch is not None:
            self.tap = StepTap(watch, self, self.up, self.down)
        for side, direction in ((self.client, self.up), (server, self.down)):
            if self.tap is None:
                side.feed = direction.feed
            else:
                side.feed = self.tap.from_client if side is self.client else self.tap.from_server
            direction.sync_fast_path()
            for data in side.early:
                side.feed(data)
            side.early.clear()
            if side.early_eof:
                direction.feed_eof()
        if not self.closed:
            self.client.connected.resume_reading()
            server.connected.resume_reading()

    def untap(self) -> None:
        """Stop parsing: both directions back on their plain path."""
        self.tap = None
        for side, direction in ((self.client, self.up), (self.server, self.down)):
            if side is not None and direction is not None and not direction.done and side.feed is not _discard:
                side.feed = direction.feed
                direction.sync_fast_path()

    def owner_pid(self) -> int | None:
        """The pid holding the client's end of this connection (None if unknown)."""
        if self.client is None or self.client.transport is None:
            return None
        peer = self.client.transport.get_extra_info("peername")
        local = self.client.transport.get_extra_info("sockname")
        if not peer or not local:
            return None
        return owner_pid(int(peer[1]), int(local[1]))

    def refresh(self) -> None:
        """Apply the proxy's current toxic chains to this connection."""
        if self.up is None or self.down is None or self.closed:
            return
        self.up.refresh(self.proxy.toxics.upstream)
        self.down.refresh(self.proxy.toxics.downstream)  # no-op if that closed us

    # -- events from the sides ------------------------------------------------------
    def _direction_from(self, side: Side) -> Direction | None:
        return self.up if side.is_client else self.down

    def source_eof(self, side: Side) -> None:
        direction = self._direction_from(side)
        if direction is not None:
            direction.feed_eof()

    def side_lost(self, side: Side) -> None:
        if self.closed:
            return
        if self.up is None or self.down is None:
            self.close(abort=True)
            return
        # Whatever this side had sent still goes out; nothing can reach it any more.
        towards = self.down if side.is_client else self.up
        towards.done = True
        towards.stop()
        towards.source_side.feed = _discard
        towards.source_side.fast_write = None
        self._direction_from(side).feed_eof()  # type: ignore[union-attr]
        self.direction_done()

    def sink_paused(self, side: Side, paused: bool) -> None:
        direction = self.down if side.is_client else self.up
        if direction is not None:
            direction.sink_paused(paused)

    def direction_done(self) -> None:
        if self.up is not None and self.down is not None and self.up.done and self.down.done:
            self.close(abort=False)

    def reset(self) -> None:
        """Close both sockets with a TCP RST (SO_LINGER 0), as reset_peer does."""
        for side in (self.client, self.server):
            if side is not None and side.transport is not None:
                sock = side.transport.get_extra_info("socket")
                if sock is not None:
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    except OSError:
                        pass
        self.close(abort=True)

    def close(self, *, abort: bool) -> None:
        """Close both sockets; abort drops unsent data (used to cut connections)."""
        if self.closed:
            return
        self.closed = True
        self.proxy.connection_closed(self)
        if self._connector is not None and not self._connector.done() and self._connector is not asyncio.current_task():
            self._connector.cancel()
        for direction in (self.up, self.down):
            if direction is not None:
                direction.stop()
        for side in (self.client, self.server):
            if side is not None and side.transport is not None:
                if abort:
                    side.transport.abort()
                else:
                    side.transport.close()
