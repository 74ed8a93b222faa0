"""The domain layer on Redis: inventory, orders and the `mark_paid` guard.

Every change is one Lua script, so two concurrent payments for one order can never
both apply, and an order is never created without its inventory reservation.
The guard (DESIGN.md): a payment is accepted only in INVENTORY_RESERVED; PAID with
the same provider_ref → already paid (no second payment, success to the caller);
PAID with another ref → conflict (409); an amount different from the order's →
mismatch (422); an unknown order → 404. The `domain` mutant skips the state and ref
check, so every accepted payment writes a payment.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

import redis

from target_app.keys import (
    COUNTERS,
    ORDERS_INDEX,
    SKUS_INDEX,
    inventory_key,
    order_by_idempotency_key,
    order_key,
    payments_key,
)

MAX_QUANTITY = 1_000_000
MAX_AMOUNT_CENTS = 10**12
MAX_STOCK = 10**12

# Shared by the MARK_PAID script and the inbox's script (target_app/inbox.py).
# mark_paid(order_key, payments_key, counters_key, provider_ref, amount_cents,
#           payment_json, now, guard) -> outcome
#   guard "1": the real state/ref check; "0": the `domain` mutant (no check)
MARK_PAID_FUNCTION = """
local function mark_paid(order_key, payments_key, counters_key, ref, amount, payment_json, now, guard)
  local order = redis.call('HMGET', order_key, 'status', 'amount_cents', 'provider_ref')
  if not order[1] then
    return 'unknown_order'
  end
  if tonumber(order[2]) ~= tonumber(amount) then
    redis.call('HINCRBY', counters_key, 'domain_amount_mismatches', 1)
    return 'amount_mismatch'
  end
  if guard == '1' and order[1] ~= 'INVENTORY_RESERVED' then
    if order[1] == 'PAID' and order[3] == ref then
      redis.call('HINCRBY', counters_key, 'domain_already_paid', 1)
      return 'already_paid'
    end
    redis.call('HINCRBY', counters_key, 'domain_conflicts', 1)
    return 'conflict'
  end
  redis.call('HSET', order_key, 'status', 'PAID', 'provider_ref', ref, 'paid_at', now)
  redis.call('RPUSH', payments_key, payment_json)
  return 'paid'
end
"""

# KEYS[1] order hash, KEYS[2] the order's payments list, KEYS[3] counters hash
# ARGV[1] provider_ref, ARGV[2] amount_cents, ARGV[3] payment JSON, ARGV[4] now,
# ARGV[5] guard ("1" real, "0" domain mutant)
MARK_PAID_LUA = MARK_PAID_FUNCTION + """
return mark_paid(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
"""

# KEYS[1] inventory hash of the SKU, KEYS[2] the new order's hash, KEYS[3] orders index,
# KEYS[4] the API layer's recovery point for (tenant, Idempotency-Key)
# ARGV[1] quantity, ARGV[2] order id, ARGV[3] recovery point TTL in seconds ("0": none),
# ARGV[4..] the order's field/value pairs
# Returns {"created" | "recovered" | "unknown_sku" | "out_of_stock", order id}
CREATE_ORDER_LUA = """
if ARGV[3] ~= '0' then
  local existing = redis.call('GET', KEYS[4])
  if existing then
    return {'recovered', existing}
  end
end
local available = redis.call('HGET', KEYS[1], 'available')
if not available then
  return {'unknown_sku', ''}
end
if tonumber(available) < tonumber(ARGV[1]) then
  return {'out_of_stock', ''}
end
redis.call('HINCRBY', KEYS[1], 'available', -tonumber(ARGV[1]))
redis.call('HSET', KEYS[2], unpack(ARGV, 4))
redis.call('SADD', KEYS[3], ARGV[2])
if ARGV[3] ~= '0' then
  redis.call('SET', KEYS[4], ARGV[2], 'EX', tonumber(ARGV[3]))
end
return {'created', ARGV[2]}
"""

# KEYS[1] inventory hash of the SKU, KEYS[2] SKU index
# ARGV[1] sku, ARGV[2] initial count. Seeds only a SKU that does not exist yet.
SEED_SKU_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'available', ARGV[2], 'added_total', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
"""

# KEYS[1] inventory hash of the SKU, KEYS[2] SKU index
# ARGV[1] sku, ARGV[2] new available count. added_total moves by the delta.
PUT_STOCK_LUA = """
local old = tonumber(redis.call('HGET', KEYS[1], 'available') or '0')
local added = redis.call('HINCRBY', KEYS[1], 'added_total', tonumber(ARGV[2]) - old)
redis.call('HSET', KEYS[1], 'available', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
return added
"""

OUTCOME_STATUS = {"paid": 200, "already_paid": 200, "conflict": 409,
                  "amount_mismatch": 422, "unknown_order": 404}


@dataclass(frozen=True)
class CreateResult:
    outcome: str  # created | recovered | unknown_sku | out_of_stock
    order: dict | None = None


def payment_json(order_id: str, provider_ref: str, amount_cents: int, source: str,
                 source_id: str, now: float) -> str:
    return json.dumps({"order_id": order_id, "provider_ref": provider_ref,
                       "amount_cents": amount_cents, "source": source, "source_id": source_id,
                       "applied_at": now}, separators=(",", ":"))


def decode_order(order_id: str, fields: dict) -> dict:
    order = {
        "id": order_id,
        "tenant": fields.get("tenant", "default"),
        "idempotency_key": fields.get("idempotency_key") or None,
        "sku": fields.get("sku"),
        "quantity": int(fields.get("quantity", 0)),
        "amount_cents": int(fields.get("amount_cents", 0)),
        "currency": fields.get("currency"),
        "status": fields.get("status"),
        "created_at": float(fields.get("created_at", 0)),
    }
    if fields.get("provider_ref"):
        order["provider_ref"] = fields["provider_ref"]
    return order


class Domain:
    """Orders, payments and inventory in Redis (a text client, decode_responses=True)."""

    def __init__(self, client: redis.Redis, *, guard: bool = True) -> None:
        self.client = client
        self.guard = guard
        self._create = client.register_script(CREATE_ORDER_LUA)
        self._mark_paid = client.register_script(MARK_PAID_LUA)
        self._seed = client.register_script(SEED_SKU_LUA)
        self._put_stock = client.register_script(PUT_STOCK_LUA)

    # inventory -------------------------------------------------------------
    def seed_inventory(self, inventory: dict[str, int]) -> list[str]:
        """Seed SKUs that do not exist yet; safe when many workers start at once."""
        if not inventory:
            return []
        pipe = self.client.pipeline(transaction=False)
        for sku, count in inventory.items():
            self._seed(keys=[inventory_key(sku), SKUS_INDEX], args=[sku, count], client=pipe)
        replies = pipe.execute()
        return [sku for sku, created in zip(inventory, replies) if int(created) == 1]

    def get_stock(self, sku: str) -> dict | None:
        fields = self.client.hgetall(inventory_key(sku))
        if not fields:
            return None
        return {"sku": sku, "available": int(fields["available"]),
                "added_total": int(fields.get("added_total", 0))}

    def put_stock(self, sku: str, available: int) -> dict:
        added = self._put_stock(keys=[inventory_key(sku), SKUS_INDEX], args=[sku, available])
        return {"sku": sku, "available": available, "added_total": int(added)}

    # orders ----------------------------------------------------------------
    def create_order(self, *, tenant: str, idempotency_key: str | None, sku: str, quantity: int,
                     amount_cents: int, currency: str, recovery_ttl: int = 0) -> CreateResult:
        """Reserve stock and create the order in one script.

        `recovery_ttl` > 0 (the API layer is on) also writes, in the same script, a
        recovery point from (tenant, key) to the order. A retry that runs the
        handler again, because the first response could not be recorded before the
        in-flight lease ran out, then finds the order instead of creating another.
        """
        order_id = "ord_" + uuid.uuid4().hex
        now = time.time()
        fields = {"id": order_id, "tenant": tenant, "idempotency_key": idempotency_key or "",
                  "sku": sku, "quantity": quantity, "amount_cents": amount_cents,
                  "currency": currency, "status": "INVENTORY_RESERVED", "created_at": repr(now)}
        flat: list = []
        for name, value in fields.items():
            flat += [name, value]
        recovery = order_by_idempotency_key(tenant, idempotency_key or "")
        outcome, found_id = self._create(
            keys=[inventory_key(sku), order_key(order_id), ORDERS_INDEX, recovery],
            args=[quantity, order_id, recovery_ttl if idempotency_key else 0, *flat],
        )
        if outcome == "recovered":
            return CreateResult("recovered", self.get_order(found_id))
        if outcome != "created":
            return CreateResult(outcome)
        order = decode_order(order_id, {k: str(v) for k, v in fields.items()})
        order["payments"] = []
        return CreateResult("created", order)

    def get_order(self, order_id: str) -> dict | None:
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(order_key(order_id))
        pipe.lrange(payments_key(order_id), 0, -1)
        fields, payments = pipe.execute()
        if not fields:
            return None
        order = decode_order(order_id, fields)
        order["payments"] = [json.loads(p) for p in payments]
        return order

    def mark_paid(self, order_id: str, *, provider_ref: str, amount_cents: int, source: str,
                  source_id: str) -> str:
        """One atomic script; returns the outcome (see OUTCOME_STATUS)."""
        now = time.time()
        return self._mark_paid(
            keys=[order_key(order_id), payments_key(order_id), COUNTERS],
            args=[provider_ref, amount_cents,
                  payment_json(order_id, provider_ref, amount_cents, source, source_id, now),
                  repr(now), "1" if self.guard else "0"],
        )

    def incr_counter(self, name: str, by: int = 1) -> None:
        self.client.hincrby(COUNTERS, name, by)
