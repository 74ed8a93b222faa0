"""Toxics: their JSON model (as Toxiproxy 2.12 parses and prints it) and their
behaviour on one direction of one connection.

A `Toxic` is the API object, shared by every connection of a proxy. A `Behaviour`
is that toxic acting on one direction of one connection; it reads the toxic's
attributes live, so an update applies to connections already open.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from harness.toxiproxy.errors import (
    INVALID_STREAM,
    INVALID_TOXIC_TYPE,
    api_error,
    bad_request_body,
)
from harness.toxiproxy.godecode import GoNumber, fold_keys
from harness.toxiproxy.godecode import kind as _json_kind
from harness.toxiproxy.gojson import FLOAT32_MAX, to_float32

# Attribute names per toxic type; all are integers defaulting to 0 (Go's int64).
TOXIC_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "latency": ("latency", "jitter"),
    "bandwidth": ("rate",),
    "slow_close": ("delay",),
    "timeout": ("timeout",),
    "reset_peer": ("timeout",),
    "slicer": ("average_size", "size_variation", "delay"),
    "limit_data": ("bytes",),
    "noop": (),
}

# Go's struct names, used in error messages the way encoding/json words them.
_GO_STRUCT = {
    "latency": "LatencyToxic",
    "bandwidth": "BandwidthToxic",
    "slow_close": "SlowCloseToxic",
    "timeout": "TimeoutToxic",
    "reset_peer": "ResetToxic",
    "slicer": "SlicerToxic",
    "limit_data": "LimitDataToxic",
    "noop": "NoopToxic",
}

_INT64_MAX = 2**63 - 1


@dataclass(eq=False)
class Toxic:
    """One toxic of a proxy; identity matters (connections key their state by it)."""

    name: str
    type: str
    stream: str  # as the client sent it; direction is derived case-insensitively
    upstream: bool
    toxicity: float
    attributes: dict[str, int] = field(default_factory=dict)
    revision: int = 0  # bumped by every update so open connections re-arm timers

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": dict(self.attributes),
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
        }


# ToxicWrapper's JSON fields; keys match them case-insensitively, as in Go.
_WRAPPER_FIELDS = ("name", "type", "stream", "toxicity", "attributes")


def _expect_str(body: dict[str, Any], key: str, struct: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_request_body(
            f"json: cannot unmarshal {_json_kind(value)} into Go struct field {struct}.{key} of type string"
        )
    return value


def parse_toxicity(value: Any, struct: str = "ToxicWrapper") -> float:
    """Toxicity as Go holds it: a float32 (0.1 is stored, and shown, as float32 0.1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad_request_body(
            f"json: cannot unmarshal {_json_kind(value)} into Go struct field {struct}.toxicity of type float32"
        )
    if abs(value) > FLOAT32_MAX:
        text = value.literal if isinstance(value, GoNumber) else str(value)
        raise bad_request_body(
            f"json: cannot unmarshal number {text} into Go struct field {struct}.toxicity of type float32"
        )
    return to_float32(float(value))


def parse_attributes(toxic_type: str, raw: Any, base: dict[str, int]) -> dict[str, int]:
    """Merge raw JSON attributes over base; unknown keys are ignored, as in Go."""
    if raw is None:
        return dict(base)
    struct = _GO_STRUCT[toxic_type]
    if not isinstance(raw, dict):
        raise bad_request_body(
            f"json: cannot unmarshal {_json_kind(raw)} into Go struct field .attributes of type toxics.{struct}"
        )
    raw = fold_keys(raw, TOXIC_ATTRIBUTES[toxic_type])
    merged = dict(base)
    for key in TOXIC_ATTRIBUTES[toxic_type]:
        if key not in raw or raw[key] is None:
            continue
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad_request_body(
                f"json: cannot unmarshal {_json_kind(value)} into Go struct field {struct}.attributes.{key} of type int64"
            )
        if isinstance(value, float) or abs(value) > _INT64_MAX:
            # Go parses an int64 from the number's text: 1.0 and 1e3 are refused too.
            text = value.literal if isinstance(value, GoNumber) else str(value)
            raise bad_request_body(
                f"json: cannot unmarshal number {text} into Go struct field {struct}.attributes.{key} of type int64"
            )
        merged[key] = int(value)
    return merged


def parse_direction(stream: str) -> bool:
    """True for upstream, False for downstream; anything else is Toxiproxy's 400."""
    lowered = stream.lower()
    if lowered == "upstream":
        return True
    if lowered == "downstream":
        return False
    raise api_error(INVALID_STREAM)


def parse_new_toxic(body: Any) -> Toxic:
    """A new Toxic from a create request body, with Toxiproxy's defaults and checks
    in its order (body, stream, type); name uniqueness is the collection's job."""
    if not isinstance(body, dict):
        raise bad_request_body(f"json: cannot unmarshal {_json_kind(body)} into Go value of type toxics.ToxicWrapper")
    body = fold_keys(body, _WRAPPER_FIELDS)
    attributes = body.get("attributes")
    if attributes is not None and not isinstance(attributes, dict):
        # Go's first pass decodes attributes into a field-less NoopToxic.
        raise bad_request_body(
            f"json: cannot unmarshal {_json_kind(attributes)} into Go struct field "
            "ToxicWrapper.attributes of type toxics.NoopToxic"
        )
    name = _expect_str(body, "name", "ToxicWrapper") or ""
    toxic_type = _expect_str(body, "type", "ToxicWrapper") or ""
    stream = _expect_str(body, "stream", "ToxicWrapper")
    if stream is None:
        stream = "downstream"
    toxicity = 1.0 if body.get("toxicity") is None else parse_toxicity(body["toxicity"])
    upstream = parse_direction(stream)
    if not name:
        name = f"{toxic_type}_{stream}"
    if toxic_type not in TOXIC_ATTRIBUTES:
        raise api_error(INVALID_TOXIC_TYPE)
    base = {key: 0 for key in TOXIC_ATTRIBUTES[toxic_type]}
    return Toxic(name, toxic_type, stream, upstream, toxicity, base)


def parse_new_attributes(toxic: Toxic, body: dict[str, Any]) -> None:
    """Second pass of creation, after the name check (Go decodes attributes last)."""
    raw = fold_keys(body, _WRAPPER_FIELDS).get("attributes")
    toxic.attributes = parse_attributes(toxic.type, raw, toxic.attributes)


_UPDATE_STRUCT = (
    'struct { Attributes interface {} "json:\\"attributes\\""; Toxicity float32 "json:\\"toxicity\\"" }'
)


def parse_update(toxic: Toxic, body: Any) -> tuple[dict[str, int], float]:
    """New (attributes, toxicity) from an update body; only those two are merged.
    Go decodes it into an anonymous struct, which its error messages show."""
    if body is None:
        return dict(toxic.attributes), toxic.toxicity
    if not isinstance(body, dict):
        raise bad_request_body(f"json: cannot unmarshal {_json_kind(body)} into Go value of type {_UPDATE_STRUCT}")
    body = fold_keys(body, _WRAPPER_FIELDS)
    attributes = parse_attributes(toxic.type, body.get("attributes"), toxic.attributes)
    toxicity = toxic.toxicity if body.get("toxicity") is None else parse_toxicity(body["toxicity"], struct="")
    return attributes, toxicity


# --- behaviour on a connection ------------------------------------------------

class Timing(NamedTuple):
    """When a chunk is, as Toxiproxy's pipeline of toxics would see it.

    Toxiproxy runs each toxic as its own goroutine, so a toxic takes the next chunk
    as soon as it let the previous one go; here one task takes each chunk through
    the whole chain, and `ready` keeps the pipeline's clock: the moment the chunk
    reached the current toxic (its arrival, for the first). `stamp` is Toxiproxy's
    chunk timestamp: its arrival, moved on by every latency toxic it went through.
    """

    stamp: float
    ready: float


# Passes a piece of data on to the next toxic.
Emit = Callable[[bytes, Timing], Awaitable[None]]


class LinkControl(Protocol):
    """What a behaviour may do to the connection it sits on."""

    def end_direction(self) -> None: ...

    def close_connection(self) -> None: ...

    def reset_connection(self) -> None: ...


def _resolve(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(True)


class Behaviour:
    """A toxic acting on one direction of one connection. Default: pass through."""

    def __init__(self, toxic: Toxic, link: LinkControl) -> None:
        self.toxic = toxic
        self.link = link
        self.revision = toxic.revision
        self._stopped = False
        self._sleeping: asyncio.Future[bool] | None = None

    def start(self) -> None:
        """Called when the toxic starts acting on this connection (or is updated)."""
        self._stopped = False

    def stop(self) -> None:
        """Called when the toxic stops acting (removed, updated, connection closed).
        A chunk it is holding is let go at once, as Toxiproxy's interrupt does."""
        self._stopped = True
        if self._sleeping is not None and not self._sleeping.done():
            self._sleeping.set_result(False)

    async def _sleep(self, delay: float) -> bool:
        """Sleep that `stop` cuts short (a huge latency must not pin a chunk).
        True when it slept the whole delay, False when it was cut short."""
        if self._stopped:
            return False
        if delay <= 0:
            return True
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        handle = loop.call_later(delay, _resolve, future)
        self._sleeping = future
        try:
            return await future
        finally:
            handle.cancel()
            self._sleeping = None

    def removed(self) -> None:
        """Called once the toxic was deleted from the proxy (after stop)."""

    async def chunk(self, data: bytes, timing: Timing, emit: Emit) -> None:
        await emit(data, timing)

    async def before_close(self) -> None:
        """Runs when the source closed, before the close is passed on."""


class _Latency(Behaviour):
    """Toxiproxy's latency toxic, to the millisecond: it takes a chunk once it let
    the previous one go, sleeps `latency +- jitter` minus the time since the chunk's
    timestamp, and moves the timestamp on by that sleep, so the next latency toxic
    counts from there. Stacked toxics therefore add up for a chunk that did not
    queue (two of 100 ms: 200 ms per round trip); in a steady stream the second one
    lets chunks through early, as it does in Toxiproxy (chunks 20 ms apart through
    two of 100 ms arrive 120 ms after they were sent once the stream flows)."""

    def __init__(self, toxic: Toxic, link: LinkControl) -> None:
        super().__init__(toxic, link)
        self._free_at = 0.0  # pipeline time at which this toxic let its last chunk go

    async def chunk(self, data: bytes, timing: Timing, emit: Emit) -> None:
        attrs = self.toxic.attributes
        delay = attrs["latency"]
        jitter = attrs["jitter"]
        if jitter > 0:
            delay += random.randrange(-jitter, jitter)  # Go: Int63n(2*jitter) - jitter
        taken = max(timing.ready, self._free_at)
        sleep = delay / 1000.0 - (taken - timing.stamp)  # may be negative, as in Go
        leaves = taken + max(sleep, 0.0)
        self._free_at = leaves
        remaining = leaves - time.monotonic()
        if remaining > 0 and not await self._sleep(remaining):
            # Cut short (removed or updated): let it go at once with the timestamp
            # it had, as Toxiproxy's interrupt does.
            self._free_at = time.monotonic()
            await emit(data, Timing(timing.stamp, self._free_at))
            return
        await emit(data, Timing(timing.stamp + sleep, leaves))


class _Bandwidth(Behaviour):
    async def chunk(self, data: bytes, timing: Timing, emit: Emit) -> None:
        view = memoryview(data)
        while view:
            rate = self.toxic.attributes["rate"]  # KB/s; read live so updates apply
            if rate <= 0:
                await emit(bytes(view), timing)
                return
            # Send at most 100 ms worth at a time, then wait that long.
            step = max(1, rate * 100)
            piece, view = view[:step], view[step:]
            await self._sleep(len(piece) / (rate * 1000.0))
            # It really waited: the next toxic gets the piece now.
            timing = Timing(timing.stamp, max(timing.ready, time.monotonic()))
            await emit(bytes(piece), timing)


class _SlowClose(Behaviour):
    async def before_close(self) -> None:
        delay = self.toxic.attributes["delay"]
        if delay > 0:
            await self._sleep(delay / 1000.0)


class _Timeout(Behaviour):
    """Drops all data. With timeout > 0 the connection closes once no data has
    arrived for that long (Toxiproxy restarts its timer on every chunk).
    Removing the toxic closes the connections it held, as Toxiproxy's cleanup does."""

    def __init__(self, toxic: Toxic, link: LinkControl) -> None:
        super().__init__(toxic, link)
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        super().start()
        self._arm()

    def stop(self) -> None:
        super().stop()
        self._cancel()

    def _cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def removed(self) -> None:
        self.link.close_connection()

    def _arm(self) -> None:
        self._cancel()
        timeout = self.toxic.attributes["timeout"]
        if timeout > 0:  # 0 holds the connection open forever
            self._handle = asyncio.get_running_loop().call_later(timeout / 1000.0, self.link.close_connection)

    async def chunk(self, data: bytes, timing: Timing, emit: Emit) -> None:
        self._arm()  # the data itself is dropped


class _ResetPeer(Behaviour):
    """Once data (or the close) arrives, waits `timeout` ms and then resets the
    connection (TCP RST via SO_LINGER 0). The data is dropped, as in Toxiproxy."""

    def __init__(self, toxic: Toxic, link: LinkControl) -> None:
        super().__init__(toxic, link)
        self._handle: asyncio.TimerHandle | None = None
        self._fired: asyncio.Event | None = None

    def stop(self) -> None:
        super().stop()
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._fired is not None:
            self._fired.set()  # a close waiting on the reset goes ahead normally
        self._fired = None

    def _trigger(self) -> asyncio.Event:
        if self._fired is None:
            self._fired = asyncio.Event()
            delay = max(self.toxic.attributes["timeout"], 0) / 1000.0
            self._handle = asyncio.get_running_loop().call_later(delay, self._fire)
        return self._fired

    def _fire(self) -> None:
        self._handle = None
        assert self._fired is not None
        self._fired.set()
        self.link.reset_connection()

    async def chunk(self, data: bytes, timing: Timing, emit: Emit) -> None:
        self._trigger()

    async def before_close(self) -> None:
        await self._trigger().wait()


class _Slicer(Behaviour):
    async def chunk(self, data: bytes, timing: Timing, emit: Emit) -> None:
        attrs = self.toxic.attributes
        average = attrs["average_size"]
        variation = attrs["size_variation"]
        delay = attrs["delay"] / 1_000_000.0
        if average <= 0:
            await emit(data, timing)
            return
        offset = 0
        while offset < len(data):
            size = average
            if variation > 0:
                size += random.randint(-variation, variation)
            size = max(1, size)
            await emit(data[offset : offset + size], timing)
            offset += size
            if delay > 0 and offset < len(data):
                await self._sleep(delay)
                timing = Timing(timing.stamp, max(timing.ready, time.monotonic()))


class _LimitData(Behaviour):
    def __init__(self, toxic: Toxic, link: LinkControl) -> None:
        super().__init__(toxic, link)
        self.passed = 0  # survives updates, as Toxiproxy keeps the toxic's state

    async def chunk(self, data: bytes, timing: Timing, emit: Emit) -> None:
        allowed = self.toxic.attributes["bytes"] - self.passed
        if allowed > 0:
            piece = data[:allowed]
            self.passed += len(piece)
            await emit(piece, timing)
        if self.passed >= self.toxic.attributes["bytes"]:
            self.link.end_direction()


BEHAVIOURS: dict[str, type[Behaviour]] = {
    "latency": _Latency,
    "bandwidth": _Bandwidth,
    "slow_close": _SlowClose,
    "timeout": _Timeout,
    "reset_peer": _ResetPeer,
    "slicer": _Slicer,
    "limit_data": _LimitData,
    "noop": Behaviour,
}


def new_behaviour(toxic: Toxic, link: LinkControl) -> Behaviour:
    return BEHAVIOURS[toxic.type](toxic, link)

