"""Stripe's form encoding decoded: brackets nest, indexed and empty brackets make lists, and
inconsistent keys are refused naming the key; the canonical form ignores key order."""

from __future__ import annotations

import pytest

from harness.provider.forms import FormError, canonical, decode


def test_nested_keys_and_lists() -> None:
    assert decode("amount=1000&currency=eur&metadata[order_id]=o-1&metadata[note]=a%20b&expand[0]=latest_charge"
                  "&expand[1]=payment_method") == {
        "amount": "1000", "currency": "eur", "metadata": {"order_id": "o-1", "note": "a b"},
        "expand": ["latest_charge", "payment_method"]}
    assert decode("expand[]=latest_charge&expand[]=customer") == {"expand": ["latest_charge", "customer"]}
    assert decode("items[0][price]=p1&items[0][quantity]=2") == {"items": [{"price": "p1", "quantity": "2"}]}
    assert decode("metadata%5Border_id%5D=o-2&empty=") == {"metadata": {"order_id": "o-2"}, "empty": ""}
    assert decode("") == {}


@pytest.mark.parametrize(("text", "param"), [
    ("metadata=x&metadata[a]=b", "metadata[a]"),
    ("metadata[a]=b&metadata=x", "metadata"),
    ("expand[0]=a&expand[2]=b", "expand"),
    ("a]b=1", "a]b"),
    ("k" + "[x]" * 9 + "=1", "k" + "[x]" * 9),
])
def test_inconsistent_keys_are_refused(text: str, param: str) -> None:
    with pytest.raises(FormError) as refused:
        decode(text)
    assert refused.value.param == param


def test_canonical_ignores_order() -> None:
    assert canonical(decode("a=1&b[x]=2&b[y]=3")) == canonical(decode("b[y]=3&a=1&b[x]=2"))
    assert canonical(decode("a=1")) != canonical(decode("a=2"))
