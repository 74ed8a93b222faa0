"""Settings of the target app, read once from the environment (`TARGET_APP_*`)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from target_app.errors import ConfigError

# The negative controls of TARGET_APP_UNSAFE_DISABLE: one per protective rule the app
# documents (docs/target-app.md), each with the rule it breaks. Read-only on purpose.
UNSAFE_LAYERS: Mapping[str, str] = MappingProxyType({
    "api": "no Idempotency-Key layer at all (no records, no recovery point)",
    "api-fingerprint": "the API layer ignores the fingerprint: another body with a used key is replayed",
    "api-tenant": "idempotency records and the recovery point are not scoped by tenant",
    "incomplete-body": "a body shorter than its Content-Length is handled and stored as if complete",
    "order-tenant": "orders are not owned by their tenant: any tenant reads and pays them",
    "domain": "mark_paid skips the state and provider_ref guard: every payment is written",
    "domain-amount": "mark_paid skips the amount check: any amount pays the order",
    "webhook-signature": "webhook signatures are not verified",
    "inbox": "no inbox dedup: every delivery of a message runs the handler",
    "inbox-nonatomic": "the inbox checks, handles and marks in separate steps (a race)",
    "inbox-dead-letter": "the consumer dead-letters on the first failed or repeated delivery",
    "consumer-ack-early": "the consumer acknowledges an entry before it applies it",
    "domain-nonatomic": "mark_paid marks the order PAID and records its payment in two steps",
    "recovery-nonatomic": "order creation writes the recovery point in a step after the order's",
    "lease-wall-clock": "the in-flight lease is measured on the app's wall clock, not as a Redis expiry",
})


def _int(environ: Mapping[str, str], name: str, default: int, *, minimum: int = 0) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    return value


def _float(environ: Mapping[str, str], name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if not value >= minimum:  # also rejects NaN
        raise ConfigError(f"{name} must be >= {minimum}, got {raw!r}")
    return value


def parse_unsafe_disable(raw: str) -> frozenset[str]:
    """`api,inbox` → {"api", "inbox"}; an unknown name is a startup error."""
    names = {part.strip() for part in raw.split(",") if part.strip()}
    unknown = names - set(UNSAFE_LAYERS)
    if unknown:
        raise ConfigError(
            f"TARGET_APP_UNSAFE_DISABLE: unknown layer(s) {sorted(unknown)}; "
            f"allowed: {', '.join(UNSAFE_LAYERS)}"
        )
    return frozenset(names)


def parse_inventory(raw: str) -> dict[str, int]:
    """`sku-1=1000,sku-2=5` → {"sku-1": 1000, "sku-2": 5}."""
    inventory: dict[str, int] = {}
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        sku, sep, amount = part.partition("=")
        sku = sku.strip()
        if not sep or not sku:
            raise ConfigError(f"TARGET_APP_INVENTORY: expected sku=count, got {part!r}")
        try:
            count = int(amount.strip())
        except ValueError:
            raise ConfigError(f"TARGET_APP_INVENTORY: count for {sku!r} is not an integer") from None
        if count < 0:
            raise ConfigError(f"TARGET_APP_INVENTORY: count for {sku!r} is negative")
        inventory[sku] = count
    return inventory


@dataclass(frozen=True)
class Settings:
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_timeout: float = 2.0
    webhook_secret: str = "dev-webhook-secret"
    idempotency_ttl: int = 86400
    inflight_lease: int = 30
    unsafe_disable: frozenset[str] = frozenset()
    stream: str = "payments"
    group: str = "target-app"
    dead_letter_stream: str = "payments-dead"
    max_deliveries: int = 5
    reclaim_idle_ms: int = 5000
    inventory: Mapping[str, int] = field(default_factory=lambda: {"sku-1": 1000, "sku-2": 5})
    max_body_bytes: int = 65536
    consumer_name: str = ""
    handler_delay_ms: int = 0
    consumer_block_ms: int = 500
    consumer_batch: int = 10
    # Bearer token of the internal endpoints; empty: they are disabled (404).
    internal_token: str = ""
    # The crash points' shared folder (target_app/crashpoints.py); empty: all off.
    crash_points_dir: str = ""

    def __post_init__(self) -> None:
        parse_unsafe_disable(",".join(self.unsafe_disable))
        if self.inflight_lease < 1 or self.idempotency_ttl < 1:
            raise ConfigError("idempotency_ttl and inflight_lease must be >= 1 second")

    @property
    def dead_letter_cap(self) -> int:
        """Raw deliveries after which an entry is parked whatever caused them (a
        safety cap far above max_deliveries: crashes and Redis errors do not count
        toward max_deliveries, only real handler failures do)."""
        return 10 * self.max_deliveries

    def unsafe(self, layer: str) -> bool:
        return layer in self.unsafe_disable

    @property
    def effective_consumer_name(self) -> str:
        return self.consumer_name or f"{socket.gethostname()}-{os.getpid()}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        defaults = cls()
        return cls(
            redis_url=env.get("TARGET_APP_REDIS_URL", "").strip() or defaults.redis_url,
            redis_timeout=_float(env, "TARGET_APP_REDIS_TIMEOUT", defaults.redis_timeout, minimum=0.01),
            webhook_secret=env.get("TARGET_APP_WEBHOOK_SECRET", "") or defaults.webhook_secret,
            idempotency_ttl=_int(env, "TARGET_APP_IDEMPOTENCY_TTL", defaults.idempotency_ttl, minimum=1),
            inflight_lease=_int(env, "TARGET_APP_INFLIGHT_LEASE", defaults.inflight_lease, minimum=1),
            unsafe_disable=parse_unsafe_disable(env.get("TARGET_APP_UNSAFE_DISABLE", "")),
            stream=env.get("TARGET_APP_STREAM", "").strip() or defaults.stream,
            group=env.get("TARGET_APP_GROUP", "").strip() or defaults.group,
            dead_letter_stream=env.get("TARGET_APP_DEAD_LETTER_STREAM", "").strip()
            or defaults.dead_letter_stream,
            max_deliveries=_int(env, "TARGET_APP_MAX_DELIVERIES", defaults.max_deliveries, minimum=1),
            reclaim_idle_ms=_int(env, "TARGET_APP_RECLAIM_IDLE_MS", defaults.reclaim_idle_ms, minimum=1),
            inventory=parse_inventory(env["TARGET_APP_INVENTORY"])
            if env.get("TARGET_APP_INVENTORY", "").strip() else dict(defaults.inventory),
            max_body_bytes=_int(env, "TARGET_APP_MAX_BODY_BYTES", defaults.max_body_bytes, minimum=64),
            consumer_name=env.get("TARGET_APP_CONSUMER_NAME", "").strip(),
            handler_delay_ms=_int(env, "TARGET_APP_HANDLER_DELAY_MS", defaults.handler_delay_ms),
            consumer_block_ms=_int(env, "TARGET_APP_CONSUMER_BLOCK_MS", defaults.consumer_block_ms, minimum=1),
            consumer_batch=_int(env, "TARGET_APP_CONSUMER_BATCH", defaults.consumer_batch, minimum=1),
            internal_token=env.get("TARGET_APP_INTERNAL_TOKEN", "").strip(),
            crash_points_dir=env.get("TARGET_APP_CRASH_POINTS_DIR", "").strip(),
        )
