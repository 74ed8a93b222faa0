"""Checking a request's parameters the way Stripe does, before anything runs.

Every failure is a 400 `invalid_request_error` naming the parameter (`param`) with
Stripe's codes (`parameter_missing`, `parameter_unknown`, `parameter_invalid_integer`,
`parameter_invalid_empty`, ...), and never stored for idempotent replays: a validation
failure may be retried with the same key. `Params` wraps the decoded form (all leaves
strings, as sent) and remembers which names were read, so `finish()` can refuse the
rest as unknown, as Stripe does.
"""

from __future__ import annotations

import re
from typing import Any

from harness.provider.errors import ApiError, invalid

MAX_AMOUNT = 99_999_999
_CURRENCY = re.compile(r"^[a-z]{3}$")
MAX_METADATA_KEYS = 50


class Params:
    def __init__(self, raw: dict[str, Any], *, ignored: tuple[str, ...] = ()) -> None:
        self.raw = raw
        self._read: set[str] = set(ignored)  # accepted and not simulated (documented)

    def _get(self, name: str) -> Any:
        self._read.add(name)
        return self.raw.get(name)

    def value(self, name: str) -> Any:
        """The raw value (a string, list or mapping), marked as read."""
        return self._get(name)

    def finish(self) -> None:
        for name in self.raw:
            if name not in self._read:
                raise invalid(f"Received unknown parameter: {name}", param=name, code="parameter_unknown")

    def string(self, name: str, *, required: bool = False, choices: tuple[str, ...] = ()) -> str | None:
        value = self._get(name)
        if value is None:
            if required:
                raise invalid(f"Missing required param: {name}.", param=name, code="parameter_missing")
            return None
        if not isinstance(value, str):
            raise invalid(f"Invalid string: {name} must be a string", param=name, code="parameter_invalid_string")
        if value == "" and required:
            raise invalid(f"You passed an empty string for '{name}'. We assume empty values are an attempt to "
                          "unset a parameter; however '{name}' cannot be unset.", param=name,
                          code="parameter_invalid_empty")
        if choices and value not in choices:
            raise invalid(f"Invalid {name}: must be one of {', '.join(choices)}", param=name)
        return value

    def integer(self, name: str, *, required: bool = False, minimum: int = 0,
                maximum: int = MAX_AMOUNT) -> int | None:
        text = self.string(name, required=required)
        if text is None:
            return None
        if not re.fullmatch(r"-?\d{1,12}", text):
            raise invalid(f"Invalid integer: {text}", param=name, code="parameter_invalid_integer")
        value = int(text)
        if value < minimum:
            raise invalid(f"This value must be greater than or equal to {minimum}.", param=name,
                          code="parameter_invalid_integer")
        if value > maximum:
            raise invalid(f"This value must be less than or equal to {maximum}.", param=name,
                          code="amount_too_large")
        return value

    def boolean(self, name: str) -> bool | None:
        text = self.string(name)
        if text is None:
            return None
        if text not in ("true", "false"):
            raise invalid(f"Invalid boolean: {text}", param=name)
        return text == "true"

    def currency(self, name: str = "currency") -> str:
        text = self.string(name, required=True)
        assert text is not None
        lowered = text.lower()
        if not _CURRENCY.match(lowered):
            raise invalid(f"Invalid currency: {text}. Stripe currently supports three-letter ISO codes.",
                          param=name, code="parameter_invalid_string")
        return lowered

    def metadata(self, name: str = "metadata") -> dict[str, str]:
        value = self._get(name)
        if value is None or value == "":
            return {}
        if not isinstance(value, dict):
            raise invalid("Invalid object", param=name, code="parameter_invalid_object")
        if len(value) > MAX_METADATA_KEYS:
            raise invalid(f"Metadata can have at most {MAX_METADATA_KEYS} keys", param=name)
        out: dict[str, str] = {}
        for key, item in value.items():
            if not isinstance(item, str):
                raise invalid("Metadata values must be strings", param=f"{name}[{key}]")
            if len(key) > 40 or len(item) > 500:
                raise invalid("Metadata keys are at most 40 characters and values at most 500",
                              param=f"{name}[{key}]")
            if item != "":  # an empty value unsets a key
                out[key] = item
        return out

    def expand(self, allowed: tuple[str, ...]) -> frozenset[str]:
        value = self._get("expand")
        if value is None:
            return frozenset()
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not isinstance(item, str) or item not in allowed:
                raise invalid(f"This property cannot be expanded ({item}).", param="expand")
        return frozenset(items)

    def limit(self) -> int:
        value = self.integer("limit", minimum=1, maximum=100)
        return 10 if value is None else value


def unexpected_state(message: str) -> ApiError:
    """A request the object's state refuses: it began executing, so it is stored."""
    return invalid(message, code="payment_intent_unexpected_state", stored=True)
