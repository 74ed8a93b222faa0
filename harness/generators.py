"""Body generators: a JSON template with `{uuid}`, `{int:A-B}`, `{choice:a|b}`,
`{stripe_id:PREFIX}` and `{key}` becomes a concrete body with fresh values, drawn from a
caller's seeded `random.Random`.

A string that is exactly one generator becomes a value of its type (`{int:5-9}` an int,
`{uuid}` a v4 UUID string, `{choice:a|b|c}` one of the words, `{stripe_id:pi}` a
Stripe-like id `pi_` + 24 letters and digits, `{key}` the `key` given). Inside longer
text every generator is replaced by its value as text, each one drawn afresh
(`pi_{int:1-9}`, `order-{uuid}`, `{choice:eur|usd}-{int:1-99}`); other braces are left
as they are. The probe's endpoints and the webhook provider's event templates both
render with this one function, so a template means the same in both places.

A leaf: stdlib only, no state of its own (the randomness is the caller's).
"""

from __future__ import annotations

import random
import re
import string
import uuid
from typing import Any
from urllib.parse import quote

_TOKEN = r"\{(uuid|key|int:(-?\d+)-(-?\d+)|choice:([^{}]+)|stripe_id:([A-Za-z][A-Za-z0-9]{0,15}))\}"
GENERATOR = re.compile(f"^{_TOKEN}$")
_IN_TEXT = re.compile(_TOKEN)
STRIPE_ID_LENGTH = 24  # what follows the prefix and `_` in Stripe's ids (pi_3N..., evt_1O...)
_ALNUM = string.ascii_letters + string.digits


def is_generated(template: Any) -> bool:
    """True when some value in `template` holds a generator other than `{key}`, as the
    whole string or inside it (it changes per render)."""
    if isinstance(template, dict):
        return any(is_generated(value) for value in template.values())
    if isinstance(template, list):
        return any(is_generated(value) for value in template)
    return isinstance(template, str) and any(match.group(1) != "key" for match in _IN_TEXT.finditer(template))


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
        return _value(match, rng, key=key)
    return _IN_TEXT.sub(lambda found: str(_value(found, rng, key=key)), template)


def _value(match: re.Match[str], rng: random.Random, *, key: str | None) -> Any:
    kind = match.group(1)
    if kind == "uuid":
        return _uuid(rng)
    if kind == "key":
        return key or ""
    if kind.startswith("int:"):
        low, high = int(match.group(2)), int(match.group(3))
        return rng.randint(min(low, high), max(low, high))
    if kind.startswith("stripe_id:"):
        return f"{match.group(5)}_" + "".join(rng.choice(_ALNUM) for _ in range(STRIPE_ID_LENGTH))
    return rng.choice(match.group(4).split("|"))


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def render_path(template: str, rng: random.Random, *, key: str | None) -> str:
    """A URL path from a template with generators anywhere in it (`/orders/ord_{uuid}/pay`,
    `/carts/{int:1-99}/checkout`): each one replaced by a fresh value, URL-quoted. Other
    braces (`{id}` of a read-back path) are left as they are."""
    return _IN_TEXT.sub(lambda match: quote(str(_value(match, rng, key=key)), safe=""), template)


def has_generator(template: str) -> bool:
    """True when a path template holds a generator (its rendered paths differ)."""
    return bool(_IN_TEXT.search(template))
