"""The request fingerprint the layer compares a reused key against.

`fingerprint(method, path, body)` is the sha256 hex of `METHOD\\nPATH\\nraw body`
(docs/internals.md); the load generator records the same value in its history.
"""

from __future__ import annotations

import hashlib


def fingerprint(method: str, path: str, body: bytes) -> str:
    """sha256 hex of `METHOD\\nPATH\\nraw body`."""
    digest = hashlib.sha256()
    digest.update(method.encode("latin-1") + b"\n" + path.encode("latin-1") + b"\n")
    digest.update(body)
    return digest.hexdigest()
