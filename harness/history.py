"""The operation log: every client operation is an invoke and exactly one completion.

Completions follow Jepsen: `ok` (the server confirmed it happened), `fail` (the
server confirmed it did not), `info` (unknown: it may or may not have happened).
After an `info` the client continues as a new process, because the old one may
still have a request in flight that lands later.

Records are JSON lines (format in docs/internals.md), one file per load process,
buffered and flushed in batches so recording costs little per operation.

What a record says about an answer is fixed here too, so the load and the checker
read it the same way: `REJECT_STATUS` (the status the app documents for each
deliberate duplicate it must refuse), `answer_summary` (the few fields of a 2xx
body the checker compares with the request) and `problem_type`.
"""

from __future__ import annotations

import hashlib
import operator
import os
import reprlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast

import msgspec
import orjson

from harness.errors import HarnessError
from harness.names import HISTORY_SUFFIX
from harness.names import LOAD_STARTED as LOAD_STARTED  # the runner imports it from here

OPERATIONS = ("create_order", "pay", "webhook", "publish", "read_order")
COMPLETIONS = ("ok", "fail", "info")
DEFAULT_TENANT = "default"

# The refusal the app documents for each `expect` that must be refused. An invoke
# with one of these carries `must_reject: true` and `reject_status`.
REJECT_STATUS: Mapping[str, int] = MappingProxyType({
    "stale_signature": 401,
    "future_signature": 401,
    "tampered_signature": 401,
    "missing_signature": 401,
    "wrong_amount": 422,
    "conflicting_ref": 409,
    "fingerprint_mismatch": 409,
    "cross_tenant_read": 404,
    "cross_tenant_pay": 404,
})

# The fields of `answer` per operation (docs/internals.md). An order document
# names its id `id`; the summary calls it `order_id` like every other record.
ORDER_ANSWER_FIELDS = ("order_id", "tenant", "sku", "quantity", "amount_cents", "status",
                       "idempotency_key", "provider_ref")
PAYMENT_ANSWER_FIELDS = ("order_id", "tenant", "status", "provider_ref", "amount_cents",
                         "already_paid")


class HistoryError(HarnessError):
    """A history file is unreadable or an operation was recorded out of order."""


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def answer_summary(op: str, data: Any) -> dict[str, Any] | None:
    """The `answer` of a 2xx JSON body: what the checker compares with the request.

    create_order / read_order answer with an order document; pay / webhook with
    `{"order": {...}, "already_paid": bool}` (the amount is the order's). A field
    the body lacks is null, so a body that omits something is still compared.
    None when the body is not a JSON object or the operation has no answer.
    """
    if not isinstance(data, dict):
        return None
    if op in ("create_order", "read_order"):
        summary = {name: data.get(name) for name in ORDER_ANSWER_FIELDS[1:]}
        return {"order_id": data.get("id"), **summary}
    if op in ("pay", "webhook"):
        order = data.get("order")
        order = order if isinstance(order, dict) else {}
        return {
            "order_id": order.get("id"),
            "tenant": order.get("tenant"),
            "status": order.get("status"),
            "provider_ref": order.get("provider_ref"),
            "amount_cents": order.get("amount_cents"),
            "already_paid": data.get("already_paid"),
        }
    return None


def problem_type(data: Any) -> str | None:
    """The `type` of an RFC 9457 problem body, or None when the body is not one."""
    if isinstance(data, dict):
        value = data.get("type")
        return value if isinstance(value, str) else None
    return None


class RecordSink(Protocol):
    """Where a Client's records go: a HistoryWriter, or a worker's forwarder to its master."""

    def record(self, record: dict[str, Any]) -> None: ...

    def flush(self) -> None: ...


class HistoryWriter:
    """Appends records to one JSON-lines file, in batches.

    A batch is written when it holds `flush_every` records or when a record arrives
    `flush_interval` seconds after the last write; `close()` writes the rest. Call
    `flush()` from a timer when the load can go idle for long.
    """

    def __init__(
        self,
        path: Path,
        *,
        flush_every: int = 512,
        flush_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab")
        self._buffer: list[bytes] = []
        self._flush_every = flush_every
        self._flush_interval = flush_interval
        self._clock = clock
        self._last_flush = clock()

    def record(self, record: dict[str, Any]) -> None:
        if self._file.closed:
            raise HistoryError(f"history {self.path} is closed")
        self._buffer.append(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        if (
            len(self._buffer) >= self._flush_every
            or self._clock() - self._last_flush >= self._flush_interval
        ):
            self.flush()

    def flush(self) -> None:
        if self._buffer and not self._file.closed:
            self._file.write(b"".join(self._buffer))
            self._file.flush()
            self._buffer.clear()
        self._last_flush = self._clock()

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._file.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class SharedHistory:
    """One history file that several threads record into: one writer behind a lock,
    and a Client per thread (`client()`), since a Client has one operation outstanding
    at a time. The clients are numbered in the order their threads first ask."""

    def __init__(self, path: Path, *, worker: str, flush_interval: float = 1.0) -> None:
        self.worker = worker
        self._writer = HistoryWriter(path, flush_interval=flush_interval)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._users = 0

    def record(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._writer.record(record)

    def flush(self) -> None:
        with self._lock:
            self._writer.flush()

    def client(self) -> Client:
        """This thread's client (made on its first call)."""
        client: Client | None = getattr(self._local, "client", None)
        if client is None:
            with self._lock:
                self._users += 1
                user = self._users
            client = self._local.client = Client(self, worker=self.worker, user=user)
        return client

    def close(self) -> None:
        with self._lock:
            self._writer.close()

    def __enter__(self) -> SharedHistory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Operation:
    """One invoked operation, waiting for its single completion."""

    def __init__(self, client: Client, op_id: str, op: str) -> None:
        self.client = client
        self.op_id = op_id
        self.op = op
        self.completed: str | None = None

    def complete(self, completion: str, **fields: Any) -> None:
        """Complete as `completion` (one of COMPLETIONS) with `fields`."""
        if completion == "info":
            self.info(**fields)
        elif completion in COMPLETIONS:
            self._complete(completion, fields)
        else:
            raise HistoryError(f"unknown completion {completion!r}; expected one of {COMPLETIONS}")

    def ok(self, **fields: Any) -> None:
        self._complete("ok", fields)

    def fail(self, **fields: Any) -> None:
        self._complete("fail", fields)

    def info(self, **fields: Any) -> None:
        self._complete("info", fields)
        self.client.become_new_process()

    def _complete(self, completion: str, fields: dict[str, Any]) -> None:
        if self.completed is not None:
            raise HistoryError(f"operation {self.op_id} already completed as {self.completed}")
        self.completed = completion
        self.client.write(
            {"type": completion, "op_id": self.op_id, "op": self.op, **fields}
        )
        self.client.outstanding = None


class Client:
    """A logical Jepsen process: one operation at a time, renamed after an `info`.

    `writer=None` records nothing (a locustfile run by hand without a history dir).
    """

    def __init__(self, writer: RecordSink | None, *, worker: str, user: int) -> None:
        self.writer = writer
        self.worker = worker
        self.user = user
        self.incarnation = 0
        self.outstanding: Operation | None = None
        self._counter = 0

    @property
    def process(self) -> str:
        return f"{self.worker}-u{self.user}-p{self.incarnation}"

    def become_new_process(self) -> None:
        self.incarnation += 1

    def abandon(self) -> None:
        """Give up the outstanding operation without a completion (its greenlet was
        killed): it reads back as `info`, and this client continues as a new process,
        because the abandoned request may still land."""
        self.outstanding = None
        self.become_new_process()

    def invoke(self, op: str, *, tenant: str = DEFAULT_TENANT, expect: str | None = None,
               **fields: Any) -> Operation:
        """Record an invoke. `tenant` and `expect` are always written; an `expect` the
        app must refuse also writes `must_reject: true` and its `reject_status`."""
        if op not in OPERATIONS:
            raise HistoryError(f"unknown operation {op!r}; expected one of {OPERATIONS}")
        if self.outstanding is not None:
            raise HistoryError(
                f"process {self.process} invoked {op} while {self.outstanding.op_id} is outstanding"
            )
        self._counter += 1
        operation = Operation(self, f"{self.process}:{self._counter}", op)
        self.outstanding = operation
        record: dict[str, Any] = {"type": "invoke", "op_id": operation.op_id, "op": op,
                                  "tenant": tenant, "expect": expect}
        reject_status = REJECT_STATUS.get(expect) if expect is not None else None
        if reject_status is not None:
            record["must_reject"] = True
            record["reject_status"] = reject_status
        record.update(fields)
        self.write(record)
        return operation

    def write(self, record: dict[str, Any]) -> None:
        if self.writer is not None:
            record["time"] = time.time()
            record["process"] = self.process
            self.writer.record(record)


def history_path(directory: Path, *, worker: str) -> Path:
    """The file of one load process: unique per host and pid, so workers never share."""
    return Path(directory) / f"{worker}-{os.getpid()}{HISTORY_SUFFIX}"


def history_files(directory: Path) -> list[Path]:
    return sorted(Path(directory).glob(f"*{HISTORY_SUFFIX}"))


# -- reading: the one reader of history files (docs/checker.md, "Reading the history") --
#
# Every consumer reads the history through `_read`, as dicts (`read_pairs`) or as the
# checker's typed records (`read_records`): the checker's fold reads records, its
# evidence pass and the findings that quote an operation (`merge_operation`) dicts,
# the report and the probe merged dicts (`iter_operations`). One pairing, one rule
# for what a file may hold:
# - one JSON object per line; blank lines are skipped;
# - a torn last line (a writer killed in the middle of a write: the file does not
#   end with a newline and that last line does not parse) is dropped, as if it had
#   never been written. A torn invoke is an operation that never started; a torn
#   completion leaves its invoke without one, so the operation reads as `info`
#   (it may or may not have happened), like any invoke without a completion. A last
#   line without its newline that parses is a whole record and is kept;
# - any other unparsable line, a line that is not an object, an unknown record type
#   or a completion without an invoke is a HistoryError: the file is not a history.


def _open(path: Path) -> Any:
    try:
        return open(path, "rb")
    except OSError as error:
        raise HistoryError(f"{path} is unreadable: {error}") from error


def _unparsable(path: Path, number: int, line: bytes, error: Exception) -> None:
    """The rule for a line that does not parse: skipped when blank or torn (the last
    line, without its newline), else a HistoryError."""
    if line.strip() and line.endswith(b"\n"):
        raise HistoryError(f"{path}:{number}: not a JSON record: {error}") from error


def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """The raw records of one file, in file order, under the one rule above."""
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    with _open(path) as handle:
        for number, line in enumerate(handle, start=1):
            try:
                record = loads(line)
            except decode_error as error:
                _unparsable(path, number, line, error)
                continue
            if type(record) is not dict:
                raise HistoryError(f"{path}:{number}: not a JSON object")
            yield record


class Answer(msgspec.Struct, gc=False):
    """A completion's `answer` as the checker reads it: the fields `answer_summary`
    writes (ORDER_ANSWER_FIELDS and PAYMENT_ANSWER_FIELDS), None when absent."""

    order_id: Any = None
    tenant: Any = None
    sku: Any = None
    quantity: Any = None
    amount_cents: Any = None
    status: Any = None
    idempotency_key: Any = None
    provider_ref: Any = None
    already_paid: Any = None


class Invoke(msgspec.Struct, tag="invoke", tag_field="type", gc=False):
    """An invoke as the checker's fold reads it: the fields it uses, each None when
    the record does not carry it (docs/internals.md has the format).

    Records are decoded straight from their lines (`read_records`) into an `Invoke`
    or a `Completion` by their `type`: every other field (`time`, `process`,
    `error`, ...) is skipped without being built, each class fills in only its own
    fields, and a slot is read faster than a dict's key; the fold reads a dozen
    fields of 10^7 records. No field's type is checked but `answer`'s (an object, or
    null), as with a dict: the fold compares values and never trusts a type.
    Evidence, which quotes operations whole, reads the same lines as dicts
    (`read_pairs`). `gc=False`: a decoded record holds only JSON values, so it is
    never part of a reference cycle. `kind` is the record's `type`.
    """

    kind: ClassVar[str] = "invoke"
    op_id: Any = None
    op: Any = None
    tenant: Any = None
    expect: Any = None
    must_reject: Any = None
    reject_status: Any = None
    idempotency_key: Any = None
    fingerprint: Any = None
    order_id: Any = None
    provider_ref: Any = None
    message_id: Any = None
    sku: Any = None
    quantity: Any = None
    amount_cents: Any = None


class Completion(msgspec.Struct, tag_field="type", gc=False):
    """A completion as the fold reads it (see `Invoke`): one of `Ok`, `Fail`, `Info`."""

    kind: ClassVar[str]
    op_id: Any = None
    op: Any = None
    status: Any = None
    replayed: Any = None
    body_digest: Any = None
    problem_type: Any = None
    order_id: Any = None
    answer: Answer | None = None


class Ok(Completion, tag="ok"):
    kind: ClassVar[str] = "ok"


class Fail(Completion, tag="fail"):
    kind: ClassVar[str] = "fail"


class Info(Completion, tag="info"):
    kind: ClassVar[str] = "info"


Record = Invoke | Ok | Fail | Info
_COMPLETIONS: Mapping[Any, type[Completion]] = MappingProxyType({"ok": Ok, "fail": Fail, "info": Info})


R = TypeVar("R")


@dataclass(frozen=True)
class _Decoding(Generic[R]):
    """How `_read` turns a line into a record of one kind: `loads` decodes it,
    `identify` gives its (type, op_id) (KeyError or TypeError when it cannot: the
    reader then looks closer), `unfinished` makes the `info` completion of an invoke
    left without one."""

    loads: Callable[[bytes], R]
    identify: Callable[[R], tuple[Any, Any]]
    unfinished: Callable[[R], R]


UNFINISHED = "no completion recorded"  # the error of an invoke's missing completion


def _unfinished_dict(invoke: dict[str, Any]) -> dict[str, Any]:
    return {"type": "info", "op_id": invoke.get("op_id"), "op": invoke.get("op"),
            "error": UNFINISHED, "time": invoke.get("time")}


def _unfinished_record(invoke: Record) -> Record:
    return Info(op_id=invoke.op_id, op=invoke.op)


_DICTS: _Decoding[dict[str, Any]] = _Decoding(orjson.loads, operator.itemgetter("type", "op_id"),
                                              _unfinished_dict)
_RECORDS: _Decoding[Record] = _Decoding(msgspec.json.Decoder(Record).decode,
                                        operator.attrgetter("kind", "op_id"), _unfinished_record)
# What either decoder raises for a line it cannot read; msgspec's ValidationError
# (a DecodeError) means valid JSON that is not a record: not an object, or an
# answer that is not one.
# msgspec's decoder recurses once per level of nesting: a line nested a thousand deep
# is a RecursionError, a line that cannot be read like any other (orjson's own depth
# limit is a JSONDecodeError).
_DECODE_ERRORS = (orjson.JSONDecodeError, msgspec.DecodeError, RecursionError)


def _shown(value: Any) -> str:
    """A record's value in a message: its repr, shortened when it is a list or an
    object (one nested a thousand deep has no repr within the recursion limit)."""
    return reprlib.repr(value) if isinstance(value, (list, dict)) else repr(value)


def read_pairs(paths: Iterable[Path]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Each operation of history files as its (invoke, completion) records, unmerged.

    Files are read one after the other, each in file order; an operation comes out
    when its completion is read. Invokes left without a completion (their process
    died, or the completion was the torn last line) come out at the end of their
    file, paired with an `info` completion `{"error": "no completion recorded"}`
    at the invoke's time. The checker reads each field from the record that
    carries it, so a million operations are never merged into copies; memory
    holds only the operations outstanding within the file being read.
    """
    return _read(paths, _DICTS)


def read_records(paths: Iterable[Path]) -> Iterator[tuple[Invoke, Completion]]:
    """`read_pairs`, each record decoded as an `Invoke` or a `Completion` (the fields
    the checker's fold reads): the same operations in the same order under the same
    rule; a record of an unknown `type`, or none, is a HistoryError here too."""
    return cast(Iterator[tuple[Invoke, Completion]], _read(paths, _RECORDS))


def _read(paths: Iterable[Path], decoding: _Decoding[R]) -> Iterator[tuple[R, R]]:
    # The records of iter_records, read here without a generator in between: this
    # loop runs twice per operation, 2 * 10^7 times for a large swarm's history.
    loads = decoding.loads
    identify = decoding.identify
    completions = COMPLETIONS
    for path in paths:
        pending: dict[Any, R] = {}
        number = 0
        with _open(path) as handle:
            # Line by line: the file iterator reuses its buffer, which is faster
            # than splitting big blocks into lists of lines.
            for line in handle:
                number += 1
                try:
                    record = loads(line)
                    kind, op_id = identify(record)
                except _DECODE_ERRORS as error:
                    if isinstance(error, msgspec.ValidationError):
                        raise HistoryError(f"{path}:{number}: not a history record: {error}") from None
                    _unparsable(path, number, line, error)
                    continue
                except (KeyError, TypeError):
                    if not isinstance(record, dict):
                        raise HistoryError(f"{path}:{number}: not a JSON object") from None
                    kind = record.get("type")
                    op_id = record.get("op_id")
                try:
                    if kind == "invoke":
                        pending[op_id] = record
                        continue
                    if kind not in completions:
                        raise HistoryError(f"{path}: unknown record type {_shown(kind)}")
                    invoke = pending.pop(op_id, None)
                except TypeError:  # an op_id that is a list or an object: no key of `pending`
                    raise HistoryError(f"{path}:{number}: op_id {_shown(op_id)} is not a string") from None
                if invoke is None:
                    raise HistoryError(f"{path}: completion {_shown(op_id)} without invoke")
                yield invoke, record
        unfinished = decoding.unfinished
        for invoke in pending.values():
            yield invoke, unfinished(invoke)


def record_fields(record: Invoke | Completion | Answer) -> dict[str, Any]:
    """The fields a typed record carries (those not None; an answer as a dict too),
    as a new dict, with a record's `type`."""
    fields = {name: value for name in record.__struct_fields__ if (value := getattr(record, name)) is not None}
    if type(fields.get("answer")) is Answer:
        fields["answer"] = record_fields(fields["answer"])
    if not isinstance(record, Answer):
        fields["type"] = record.kind
    return fields


def merge_records(invoke: Invoke, completion: Completion) -> dict[str, Any]:
    """One operation from its two typed records, as a new dict: the completion's
    fields over the invoke's, a null erasing nothing, as `merge_operation` merges;
    no times (the typed records have none)."""
    return {**record_fields(invoke), **record_fields(completion)}


def as_records(operation: Mapping[str, Any]) -> tuple[Invoke, Completion]:
    """A merged operation (a dict, as `iter_operations` gives) as its two typed
    records: what it asked and what it was answered."""
    fields = dict(operation)
    kind = fields.pop("type", None)
    completion = _COMPLETIONS.get(kind)
    if completion is None:
        raise HistoryError(f"operation {operation.get('op_id')!r}: unknown completion {kind!r}")
    try:
        return msgspec.convert(fields, Invoke), msgspec.convert(fields, completion)
    except msgspec.ValidationError as error:
        raise HistoryError(f"operation {operation.get('op_id')!r}: not a history record: {error}") from None


def merge_operation(invoke: Mapping[str, Any], completion: Mapping[str, Any]) -> dict[str, Any]:
    """One operation from its two records, as a new dict (neither record is changed).

    The completion's fields over the invoke's, except that a null never erases a
    value; `type` is the completion; `invoke_time`, `complete_time` (the
    completion's time, else the invoke's) and `time` (= the invoke's time). A
    merged operation given as both records, `(op, op)`, comes back as a copy.
    """
    merged = dict(invoke)
    if invoke is completion:
        return merged
    invoked = invoke.get("time")
    for name, value in completion.items():
        if value is not None or merged.get(name) is None:
            merged[name] = value
    merged["invoke_time"] = invoked
    merged["complete_time"] = completion.get("time", invoked)
    merged["time"] = invoked
    return merged


def iter_operations(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    """Completed operations, one dict each: the invoke's fields merged with the completion's.

    The result has `type` = the completion, `invoke_time` and `complete_time`. An
    invoke with no completion (its process died) comes out as `info`, because it
    may have taken effect. The records of `read_pairs`, merged by `merge_operation`.
    """
    for invoke, completion in read_pairs(paths):
        yield merge_operation(invoke, completion)


class HistoryFiles:
    """A run's history files as a re-iterable: iterating gives merged operations
    (`iter_operations`), `pairs()` the unmerged records (`read_pairs`), `records()`
    the same as typed records (`read_records`). Each pass reads the files again,
    so nothing is held between passes."""

    def __init__(self, paths: Iterable[Path]) -> None:
        self.paths = list(paths)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter_operations(self.paths)

    def pairs(self) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        return read_pairs(self.paths)

    def records(self) -> Iterator[tuple[Invoke, Completion]]:
        return read_records(self.paths)
