"""Webhook signature schemes, one module per provider, chosen by name.

`scheme_named("stripe" | "standard" | "github" | "shopify")` gives the scheme object
(harness/webhooks/schemes/base.py defines the interface). Each module is small and
tested against the provider's published test vector or an independent verifier.
"""

from __future__ import annotations

from harness.webhooks.schemes import github, shopify, standard, stripe
from harness.webhooks.schemes.base import Scheme, SchemeError

SCHEME_NAMES = ("stripe", "standard", "github", "shopify")


def scheme_named(name: str) -> Scheme:
    """The scheme called `name`; SchemeError naming the known ones otherwise."""
    schemes: dict[str, Scheme] = {"stripe": stripe.SCHEME, "standard": standard.SCHEME,
                                  "github": github.SCHEME, "shopify": shopify.SCHEME}
    if name not in schemes:
        raise SchemeError(f"unknown webhook scheme {name!r} (known: {', '.join(SCHEME_NAMES)})")
    return schemes[name]
