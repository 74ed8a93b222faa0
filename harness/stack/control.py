"""The client side of a supervisor's control socket.

One request per connection: a JSON line `{"action": ..., "service": ...}`, answered
by one JSON line `{"ok": true, ...}` or `{"ok": false, "error": ...}` (the server is
`harness.stack.supervisor.serve`). A supervisor that does not answer, answers
garbage or says no is a `StackError` carrying its words.

This module imports nothing of the stack but its state types, so the registry can
ask a supervisor to heal a service without importing the stack handle.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.json_lines import read_line
from harness.stack.info import StackError, control_socket_path


def request(root: Path, action: str, service: str | None = None, *, timeout: float = 120.0,
            fields: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Send one request to the supervisor of the stack in root; its answer when ok.
    `fields` are the action's own arguments (`restart_services`: env, app_workers, flush_data)."""
    path = control_socket_path(root)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(path))
            conn.sendall(json.dumps({**(fields or {}), "action": action, "service": service}).encode() + b"\n")
            data = read_line(conn, timeout=timeout)
    except OSError as error:
        raise StackError(f"the stack supervisor at {path} did not answer: {error}") from error
    try:
        response = json.loads(data)
    except ValueError as error:
        raise StackError(f"the stack supervisor sent a bad answer: {data[:200]!r}") from error
    if not isinstance(response, dict):
        raise StackError(f"the stack supervisor sent a bad answer: {data[:200]!r}")
    if not response.get("ok"):
        raise StackError(str(response.get("error", "unknown supervisor error")))
    return response
