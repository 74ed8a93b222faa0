"""Request bodies read the way Toxiproxy's Go handlers read them with
`json.NewDecoder(body).Decode(&struct)`:

- only the first JSON value counts; whatever follows it is ignored;
- an empty body is `EOF`, a cut-off one `unexpected EOF`, and a syntax error is
  worded as Go's scanner words it (`invalid character 'b' looking for beginning
  of object key string`);
- object keys match struct fields case-insensitively (`"Name"` sets `name`), the
  last of several matching keys winning;
- invalid UTF-8 becomes U+FFFD, and NaN / Infinity are not JSON;
- a number written with a fraction or exponent stays a `GoNumber` (a float that
  remembers its text), since Go refuses `1e3` or `1.0` for an integer field.

`decode` raises `GoJsonError` with Go's text; callers prefix `bad request body: `.
"""

from __future__ import annotations

import json
from typing import Any


class GoJsonError(ValueError):
    """A body Go's decoder would reject; str() is Go's message."""


class GoNumber(float):
    """A JSON number with a fraction or exponent, and the text it was written as."""

    literal: str

    def __new__(cls, literal: str) -> GoNumber:
        number = super().__new__(cls, literal)
        number.literal = literal
        return number


def _not_json(constant: str) -> Any:
    raise ValueError(constant)


_DECODER = json.JSONDecoder(parse_constant=_not_json, parse_float=GoNumber)
_LITERALS = ("null", "true", "false")
_WHITESPACE = " \t\n\r"


def _quote_char(char: str) -> str:
    """Go's quoteChar: how its scanner errors show the offending character."""
    if char == "'":
        return "'\\''"
    if char == '"':
        return "'\"'"
    quoted = json.dumps(char)[1:-1]  # \n, \t, \u0001 ... as Go's strconv.Quote mostly does
    return f"'{quoted}'"


def _innermost(text: str, end: int) -> str:
    """'{' or '[' of the container open at `end`, skipping strings."""
    stack: list[str] = []
    in_string = escaped = False
    for char in text[:end]:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            stack.append(char)
        elif char in "}]" and stack:
            stack.pop()
    return stack[-1] if stack else ""


def _go_message(error: json.JSONDecodeError) -> str:
    text, pos, message = error.doc, error.pos, error.msg
    if pos >= len(text) or message.startswith("Unterminated string"):
        return "unexpected EOF"
    char = _quote_char(text[pos])
    if message.startswith("Expecting value"):
        rest = text[pos:]
        for literal in _LITERALS:
            if rest[0] == literal[0]:
                for index, expected in enumerate(literal):
                    if index == len(rest):
                        return "unexpected EOF"
                    if rest[index] != expected:
                        return (f"invalid character {_quote_char(rest[index])} in literal {literal} "
                                f"(expecting {_quote_char(expected)})")
        if rest[0] == "-":
            if len(rest) == 1:
                return "unexpected EOF"
            return f"invalid character {_quote_char(rest[1])} in numeric literal"
    if message.startswith("Expecting property name"):
        return f"invalid character {char} looking for beginning of object key string"
    if message.startswith("Expecting ':'"):
        return f"invalid character {char} after object key"
    if message.startswith("Expecting ','"):
        where = "object key:value pair" if _innermost(text, pos) == "{" else "array element"
        return f"invalid character {char} after {where}"
    if message.startswith("Invalid control character"):
        return f"invalid character {char} in string literal"
    if message.startswith("Invalid \\escape") or message.startswith("Invalid \\u"):
        return f"invalid character {_quote_char(text[pos + 1]) if pos + 1 < len(text) else char} in string escape code"
    return f"invalid character {char} looking for beginning of value"


def decode(body: bytes) -> Any:
    text = body.decode("utf-8", "replace")
    start = len(text) - len(text.lstrip(_WHITESPACE))
    if start == len(text):
        raise GoJsonError("EOF")
    try:
        value, _ = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise GoJsonError(_go_message(exc)) from None
    except ValueError as exc:  # NaN, Infinity, -Infinity
        raise GoJsonError(f"invalid character {_quote_char(str(exc)[0])} looking for beginning of value") from None
    except RecursionError:
        # Go's decoder refuses nesting past 10,000 levels with this message; Python's
        # recursion limit comes first, so the limit here is lower, the answer the same.
        raise GoJsonError("exceeded max depth") from None
    return value


def fold_keys(obj: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """obj with keys that match one of `fields` case-insensitively renamed to it
    (an exact match preferred, later keys winning); other keys are dropped, as Go
    ignores unknown fields."""
    folded: dict[str, Any] = {}
    lowered = {field.lower(): field for field in fields}
    for key, value in obj.items():
        field = key if key in fields else lowered.get(key.lower())
        if field is not None:
            folded[field] = value
    return folded


def kind(value: Any) -> str:
    """The JSON type name Go's errors use."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"
