"""Stripe's form encoding: `a=1&metadata[order_id]=o-1&expand[0]=latest_charge` ⇄ nested values.

Stripe's API takes `application/x-www-form-urlencoded` bodies (and query strings) whose
keys nest with brackets: `k[sub]` is a mapping, `k[0]`/`k[1]` (what stripe-python sends)
and `k[]` (what curl users write) are a list. `decode` builds the nested value (every
leaf stays a string, as on the wire; the handlers convert); a key that is both a leaf and
a container, or a list index out of sequence, is a `FormError`. `canonical` is the
parameters as one comparable string, for the idempotency layer's "same parameters" check.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl

from harness.errors import HarnessError

_KEY = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$")
_PART = re.compile(r"\[([^\[\]]*)\]")
MAX_DEPTH = 8  # deeper nesting than any Stripe parameter: refuse rather than recurse


class FormError(HarnessError):
    """A form body whose keys do not nest consistently; `param` names the key."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def decode(text: str) -> dict[str, Any]:
    """The nested parameters of a form body or query string."""
    root: dict[str, Any] = {}
    for key, value in parse_qsl(text, keep_blank_values=True):
        match = _KEY.match(key)
        if not match:
            raise FormError(f"Invalid parameter name: {key}", key)
        parts = [match.group(1), *_PART.findall(match.group(2))]
        if len(parts) > MAX_DEPTH:
            raise FormError(f"Parameter {key} is nested too deeply", key)
        _insert(root, parts, value, key)
    return _lists(root)


def _insert(root: dict[str, Any], parts: list[str], value: str, key: str) -> None:
    node: dict[str, Any] = root
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "":  # k[] appends: give it the next free index
            part = str(len(node))
        if last:
            if isinstance(node.get(part), dict):
                raise FormError(f"Parameter {key} is given both as a value and as a hash", key)
            node[part] = value
            return
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise FormError(f"Parameter {key} is given both as a value and as a hash", key)
        node = child


def _lists(node: dict[str, Any]) -> dict[str, Any]:
    """Mappings whose keys are exactly 0..n-1 become lists (recursively)."""
    out: dict[str, Any] = {}
    for name, value in node.items():
        out[name] = _convert(value, name)
    return out


def _convert(value: Any, name: str) -> Any:
    if not isinstance(value, dict):
        return value
    converted = _lists(value)
    if converted and all(key.isdigit() for key in converted):
        indexes = sorted(int(key) for key in converted)
        if indexes != list(range(len(indexes))):
            raise FormError(f"Invalid array indexes for {name}: {indexes}", name)
        return [converted[str(index)] for index in indexes]
    return converted


def canonical(params: Any) -> str:
    """One string per distinct set of parameters (order of keys does not matter)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))
