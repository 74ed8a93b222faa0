"""The Idempotency-Key layer of the API: everything it owns, in one package.

- middleware.py: `IdempotencyMiddleware`, the WSGI wrapper (its docstring is the
  layer's contract and names every environ key it writes);
- endpoints.py: which requests it guards (`requires_idempotency_key`);
- context.py: `IdempotencyContext`, the one value handed to a guarded handler
  (`context_of(environ)`), and the handler's way back (`release_key()`);
- fingerprint.py: the request fingerprint;
- store.py: the `IdempotencyStore` protocol and `Begin`; memory.py: `MemoryStore`;
  redis_store.py: `RedisStore`; scripts.py: its Lua scripts.
"""

from target_app.idempotency.context import (
    CONTEXT_ENVIRON,
    IdempotencyContext,
    context_of,
)
from target_app.idempotency.endpoints import requires_idempotency_key
from target_app.idempotency.fingerprint import fingerprint
from target_app.idempotency.memory import MemoryStore
from target_app.idempotency.middleware import IdempotencyMiddleware
from target_app.idempotency.redis_store import RedisStore
from target_app.idempotency.store import Begin, IdempotencyStore

__all__ = [
    "CONTEXT_ENVIRON",
    "Begin",
    "IdempotencyContext",
    "IdempotencyMiddleware",
    "IdempotencyStore",
    "MemoryStore",
    "RedisStore",
    "context_of",
    "fingerprint",
    "requires_idempotency_key",
]
