"""What the probe reads from an answer, shared by the Locust users and the runner
(which must not import Locust: its gevent monkey-patching stays in the load process).

`classify` is the one reading of an answer to a create request: its completion (`ok`
for 2xx, `fail` for 4xx, `info` for anything else, or a 2xx body that does not parse),
the resource id where the config says, and the fields a history records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from harness.names import ENV_HISTORY_DIR, ENV_PROBE_CONFIG

if TYPE_CHECKING:
    from harness.probe.config import Endpoint

# How the runner hands the Locust processes their settings.
CONFIG_ENV = ENV_PROBE_CONFIG
HISTORY_ENV = ENV_HISTORY_DIR
EVIDENCE_BYTES = 400
# Implementations name the replay mark differently.
REPLAY_HEADERS = ("Idempotent-Replayed", "Idempotency-Replayed", "Idempotency-Replay", "X-Idempotent-Replayed")


@dataclass(frozen=True)
class Answer:
    completion: str  # ok | fail | info
    status: int
    resource_id: str | None
    retry_after: bool  # the in-flight status: the client retries
    fields: dict[str, Any]  # what the history's completion records


def classify(endpoint: Endpoint, status: int, headers: Mapping[str, str], raw: bytes) -> Answer:
    """One answer to a create request, read as the history records it."""
    data: Any = None
    parsed = True
    try:
        data = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        parsed = False
    fields: dict[str, Any] = {
        "status": status,
        "body_digest": answer_digest(raw),
        "evidence": raw[:EVIDENCE_BYTES].decode("utf-8", errors="replace"),
        "content_type": headers.get("Content-Type"),
        "replayed": replay_mark(headers),
    }
    if 200 <= status < 300:
        resource_id = find_id(endpoint, headers, data)
        if not parsed and endpoint.id.pointer is not None:
            # A 2xx whose body was cut off: the effect happened, the answer is lost.
            return Answer("info", status, None, False, {"error": "unparsable 2xx body", **fields})
        return Answer("ok", status, resource_id, False, {"resource_id": resource_id, **fields})
    if 400 <= status < 500:
        return Answer("fail", status, None, status == endpoint.expect.in_flight, fields)
    return Answer("info", status, None, False, {"error": f"HTTP {status}", **fields})


def find_id(endpoint: Endpoint, headers: Mapping[str, str], data: Any) -> str | None:
    """The created resource's id where the config says it is, as text."""
    if endpoint.id.header is not None:
        value = headers.get(endpoint.id.header)
        return value or None
    value = json_pointer(data, endpoint.id.pointer or "")
    if isinstance(value, bool):  # an int to Python, never an id
        return None
    return str(value) if isinstance(value, (str, int)) else None


def replay_mark(headers: Mapping[str, str]) -> bool | None:
    """Whether the answer says it is a replay; None when it carries no such header."""
    for name in REPLAY_HEADERS:
        value = headers.get(name)
        if value is not None:
            return value.strip().lower() in ("true", "1", "yes")
    return None


def answer_digest(raw: bytes) -> str:
    """Canonical JSON when the body parses (key order and spacing do not matter for a
    replay), else the raw bytes."""
    try:
        canonical = orjson.dumps(orjson.loads(raw), option=orjson.OPT_SORT_KEYS) if raw else b""
    except orjson.JSONDecodeError:
        canonical = raw
    return hashlib.sha256(canonical).hexdigest()


def json_pointer(data: Any, pointer: str) -> Any:
    """RFC 6901, for the few pointers a config holds; None when the path is missing."""
    if pointer == "":
        return data
    for raw in pointer.lstrip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data
