"""A running embedded Toxiproxy for any test that needs one.

`embedded_toxiproxy` (function-scoped; tests/conftest.py registers it for every test
package) yields a started `harness.toxiproxy.server.EmbeddedToxiproxy` with the real
server's default options, on a free loopback port (`.url`, `.port`), with no proxy
yet. It is stopped after the test, whatever proxies and toxics the test left on it, so
no test sees another's. A test that stops the server itself mid-test, needs other
`ServerOptions` or wants one server for a whole module constructs its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.toxiproxy.server import EmbeddedToxiproxy


@pytest.fixture
def embedded_toxiproxy() -> Iterator[EmbeddedToxiproxy]:
    """A started embedded Toxiproxy, stopped after the test."""
    with EmbeddedToxiproxy() as server:
        yield server
