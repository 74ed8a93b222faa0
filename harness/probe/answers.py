"""What the probe reads from an answer, shared by the Locust users and the runner
(which must not import Locust: its gevent monkey-patching stays in the load process).
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from harness.names import ENV_HISTORY_DIR, ENV_PROBE_CONFIG

# How the runner hands the Locust processes their settings.
CONFIG_ENV = ENV_PROBE_CONFIG
HISTORY_ENV = ENV_HISTORY_DIR


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
