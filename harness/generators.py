"""Body generators: a JSON template with `{uuid}`, `{int:A-B}`, `{choice:a|b}` and `{key}`
becomes a concrete body with fresh values, drawn from a caller's seeded `random.Random`.

A string that is exactly one generator becomes a value of its type (`{int:5-9}` an int,
`{uuid}` a v4 UUID string, `{choice:a|b|c}` one of the words, `{key}` the `key` given);
`{uuid}` and `{key}` also work inside longer text (`order-{uuid}`). Anything else is
copied as it is. The probe's endpoints and the webhook provider's event templates
both render with this one function, so a template means the same in both places.

A leaf: stdlib only, no state of its own (the randomness is the caller's).
"""

from __future__ import annotations

import random
import re
import uuid
from typing import Any
from urllib.parse import quote

GENERATOR = re.compile(r"^\{(uuid|key|int:(-?\d+)-(-?\d+)|choice:([^{}]+))\}$")


def is_generated(template: Any) -> bool:
    """True when some value in `template` is a generator other than `{key}` (it changes per render)."""
    if isinstance(template, dict):
        return any(is_generated(value) for value in template.values())
    if isinstance(template, list):
        return any(is_generated(value) for value in template)
    return isinstance(template, str) and bool(GENERATOR.match(template)) and template != "{key}"


def render_body(template: Any, rng: random.Random, *, key: str | None) -> Any:
    """A concrete body from a template: every generator replaced by a fresh value."""
    if isinstance(template, dict):
        return {name: render_body(value, rng, key=key) for name, value in template.items()}
    if isinstance(template, list):
        return [render_body(value, rng, key=key) for value in template]
    if not isinstance(template, str):
        return template
    match = GENERATOR.match(template)
    if match is not None:
        kind = match.group(1)
        if kind == "uuid":
            return _uuid(rng)
        if kind == "key":
            return key or ""
        if kind.startswith("int:"):
            low, high = int(match.group(2)), int(match.group(3))
            return rng.randint(min(low, high), max(low, high))
        return rng.choice(match.group(4).split("|"))
    if "{uuid}" in template:
        template = template.replace("{uuid}", _uuid(rng))
    if "{key}" in template:
        template = template.replace("{key}", key or "")
    return template


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


_IN_TEXT = re.compile(r"\{(?:uuid|key|int:-?\d+--?\d+|choice:[^{}]+)\}")


def render_path(template: str, rng: random.Random, *, key: str | None) -> str:
    """A URL path from a template with generators anywhere in it (`/orders/ord_{uuid}/pay`,
    `/carts/{int:1-99}/checkout`): each one replaced by a fresh value, URL-quoted. Other
    braces (`{id}` of a read-back path) are left as they are."""
    return _IN_TEXT.sub(lambda match: quote(str(render_body(match.group(0), rng, key=key)), safe=""), template)


def has_generator(template: str) -> bool:
    """True when a path template holds a generator (its rendered paths differ)."""
    return bool(_IN_TEXT.search(template))
