"""JSON bytes as Go's `encoding/json.Marshal` writes them, so answers match
Toxiproxy's byte for byte.

`dumps(value)` takes dicts (in their own order; Go sorts map keys, so callers sort
where Toxiproxy marshals a map), lists, strings, ints, bools, None and floats. Every
float is printed as Go prints a `float32` (the only float Toxiproxy has is a
toxic's toxicity): the shortest digits that read back as the same float32, `1`
not `1.0`, exponent form only below 1e-6 or from 1e21 (`1e-7`, not `1e-07`).
Output is compact, keeps non-ASCII as UTF-8, and escapes `<`, `>`, `&`, U+2028
and U+2029 as Go does by default.
"""

from __future__ import annotations

import json
import math
import re
import struct
from decimal import Decimal
from typing import Any

# Go's HTML-safe escaping, applied after Python's escaping. These characters can
# only occur inside strings in the output, so replacing them everywhere is safe.
_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_GO_ESCAPE = re.compile("[<>&\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")
FLOAT32_MAX = 3.4028234663852886e38


def to_float32(value: float) -> float:
    """The float32 nearest to value, as a Python float (Go stores toxicity so)."""
    (f32,) = struct.unpack("f", struct.pack("f", value))
    return float(f32)


def float32_text(value: float) -> str:
    """How Go's encoder prints a float32."""
    f32 = to_float32(value)
    if f32 == 0:
        return "-0" if math.copysign(1.0, f32) < 0 else "0"
    for digits in range(1, 10):
        shortest = f"{f32:.{digits}g}"
        if to_float32(float(shortest)) == f32:
            break
    magnitude = abs(f32)
    if magnitude < 1e-6 or magnitude >= 1e21:
        text = f"{float(shortest):.{digits - 1}e}"
        mantissa, _, exponent = text.partition("e")
        sign, number = exponent[0], exponent[1:]
        if sign == "-" and len(number) == 2 and number[0] == "0":
            number = number[1:]  # Go's encoder turns e-07 into e-7 (but keeps e+21)
        return f"{mantissa}e{sign}{number}"
    return format(Decimal(shortest), "f")


def _string(text: str) -> str:
    encoded = json.dumps(text, ensure_ascii=False)
    return _GO_ESCAPE.sub(lambda match: _GO_ESCAPES[match.group()], encoded)


def _encode(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(float32_text(value))
    elif isinstance(value, dict):
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                out.append(",")
            out.append(_string(str(key)))
            out.append(":")
            _encode(item, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _encode(item, out)
        out.append("]")
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def dumps(value: Any) -> bytes:
    out: list[str] = []
    _encode(value, out)
    text = "".join(out)
    try:
        return text.encode()
    except UnicodeEncodeError:
        # A lone surrogate (from a "\ud800" escape in a request) is not UTF-8; Go
        # decodes it to U+FFFD in the first place.
        return _SURROGATE.sub("\ufffd", text).encode()
