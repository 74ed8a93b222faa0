"""Fixtures of the provider's tests: an embedded provider on a free loopback port, a
stripe-python client pointed at it (the client style, `StripeClient(base_addresses=...)`;
the legacy global `stripe.api_base` is tested on its own), and a raw HTTP helper for
what the SDK hides (headers, concurrency, exact statuses)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import stripe

from harness.provider.server import EmbeddedProvider, ProviderConfig

KEY = "sk_test_provider_tests_1"


@pytest.fixture
def provider() -> Iterator[EmbeddedProvider]:
    with EmbeddedProvider(ProviderConfig(seed=7)) as running:
        yield running


@pytest.fixture
def client(provider: EmbeddedProvider) -> stripe.StripeClient:
    return stripe.StripeClient(KEY, base_addresses={"api": provider.url}, max_network_retries=0)


class Raw:
    """Form-encoded requests with the secret key, as curl would send them."""

    def __init__(self, url: str, key: str = KEY) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"

    def post(self, path: str, data: dict[str, Any] | str, key: str | None = None, **headers: str
             ) -> requests.Response:
        if key is not None:
            headers["Idempotency-Key"] = key
        return self.session.post(self.url + path, data=data, headers=headers, timeout=10)

    def get(self, path: str, **params: Any) -> requests.Response:
        return self.session.get(self.url + path, params=params, timeout=10)


@pytest.fixture
def raw(provider: EmbeddedProvider) -> Raw:
    return Raw(provider.url)
