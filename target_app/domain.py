"""The domain layer on Redis: inventory, orders and the `mark_paid` guard.

Every change is one Lua script, so two concurrent payments for one order can never
both apply, and an order is never created without its inventory reservation.
The guard: a payment is accepted only in INVENTORY_RESERVED; PAID with
the same provider_ref → already paid (no second payment, success to the caller);
PAID with another ref → conflict (409); an amount different from the order's →
mismatch (422); an unknown order, or an order of another tenant when the caller
names a tenant (the API; webhooks and messages are tenant-less) → unknown (404).
Negative controls: `domain` skips the state and ref check (every accepted payment
writes a payment), `domain-amount` skips the amount check, `order-tenant` skips the
tenant check on reads and payments, `domain-nonatomic` marks the order PAID in the
script and appends its payment in a second command (a crash between them leaves a
PAID order without its payment), `recovery-nonatomic` writes the recovery point in a
command after the order script (a failure between them leaves an order its key
cannot find).

Crash points (crashpoints.py): `domain.after_create` after the order script,
`domain.after_guard` after the mark_paid script; under the two controls above, the
second step comes after the point.

Order creation also writes the API layer's recovery point, `(tenant, key) →
order id + request fingerprint`, in the same script: a re-run with the same
fingerprint finds the order (`recovered`), another fingerprint is refused
(`mismatch`), exactly like the API layer refuses a reused key.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import redis

from target_app.crashpoints import CrashPoints
from target_app.idempotency.context import IdempotencyContext
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
#           payment_json, now, guard, amount_check, tenant) -> outcome
#   guard "1": the real state/ref check; "0": the `domain` mutant (no check)
#   amount_check "1": the amount must be the order's; "0": the `domain-amount` mutant
#   tenant: the caller's tenant, or "" when the caller is tenant-less (or `order-tenant`)
#   record: "0" leaves the payment to the caller (`domain-nonatomic`); anything else
#   (nil included) appends it here
MARK_PAID_FUNCTION = """
local function mark_paid(order_key, payments_key, counters_key, ref, amount, payment_json, now,
                         guard, amount_check, tenant, record)
  local order = redis.call('HMGET', order_key, 'status', 'amount_cents', 'provider_ref', 'tenant')
  if not order[1] then
    return 'unknown_order'
  end
  if tenant ~= '' and (order[4] or 'default') ~= tenant then
    redis.call('HINCRBY', counters_key, 'tenant_refusals', 1)
    return 'unknown_order'
  end
  if amount_check == '1' and tonumber(order[2]) ~= tonumber(amount) then
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
  if record ~= '0' then
    redis.call('RPUSH', payments_key, payment_json)
  end
  return 'paid'
end
"""

# KEYS[1] order hash, KEYS[2] the order's payments list, KEYS[3] counters hash
# ARGV[1] provider_ref, ARGV[2] amount_cents, ARGV[3] payment JSON, ARGV[4] now,
# ARGV[5] guard ("1" real, "0" domain mutant), ARGV[6] amount check ("1"/"0"),
# ARGV[7] the caller's tenant ("" none), ARGV[8] record the payment ("1"; "0" the
# `domain-nonatomic` control: the caller appends it in a second command)
MARK_PAID_LUA = MARK_PAID_FUNCTION + """
return mark_paid(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6],
                 ARGV[7], ARGV[8])
"""

# KEYS[1] inventory hash of the SKU, KEYS[2] the new order's hash, KEYS[3] orders index,
# KEYS[4] the API layer's recovery point for (tenant, Idempotency-Key), KEYS[5] counters
# ARGV[1] quantity, ARGV[2] order id, ARGV[3] recovery point TTL in seconds ("0": none),
# ARGV[4] the request fingerprint, ARGV[5] write the recovery point here ("1"; "0" the
# `recovery-nonatomic` control: the caller writes it afterwards), ARGV[6..] the
# order's field/value pairs
# The recovery point's value is "<order id> <fingerprint>" (order ids have no space;
# a value without a space predates fingerprints and matches any request).
# Returns {"created" | "recovered" | "mismatch" | "unknown_sku" | "out_of_stock", order id}
CREATE_ORDER_LUA = """
if ARGV[3] ~= '0' then
  local existing = redis.call('GET', KEYS[4])
  if existing then
    local found, fp = existing, nil
    local space = string.find(existing, ' ', 1, true)
    if space then
      found = string.sub(existing, 1, space - 1)
      fp = string.sub(existing, space + 1)
    end
    if fp and fp ~= ARGV[4] then
      redis.call('HINCRBY', KEYS[5], 'api_fingerprint_conflicts', 1)
      return {'mismatch', found}
    end
    redis.call('HINCRBY', KEYS[5], 'api_recovered', 1)
    return {'recovered', found}
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
redis.call('HSET', KEYS[2], unpack(ARGV, 6))
redis.call('SADD', KEYS[3], ARGV[2])
if ARGV[3] ~= '0' and ARGV[5] == '1' then
  redis.call('SET', KEYS[4], ARGV[2] .. ' ' .. ARGV[4], 'EX', tonumber(ARGV[3]))
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

# A JSON document the API answers with (an order, a stock level).
Document = dict[str, object]
PaymentOutcome = Literal["paid", "already_paid", "conflict", "amount_mismatch", "unknown_order"]
CreateOutcome = Literal["created", "recovered", "mismatch", "unknown_sku", "out_of_stock"]

OUTCOME_STATUS: Mapping[str, int] = {"paid": 200, "already_paid": 200, "conflict": 409,
                  "amount_mismatch": 422, "unknown_order": 404}


@dataclass(frozen=True)
class CreateResult:
    outcome: CreateOutcome
    order: Document | None = None


def payment_outcome(raw: object) -> PaymentOutcome:
    """The MARK_PAID script's answer as a PaymentOutcome (anything else is a bug)."""
    for outcome in ("paid", "already_paid", "conflict", "amount_mismatch", "unknown_order"):
        if raw == outcome:
            return outcome
    raise ValueError(f"mark_paid answered {raw!r}")


def payment_json(order_id: str, provider_ref: str, amount_cents: int, source: str,
                 source_id: str, now: float) -> str:
    return json.dumps({"order_id": order_id, "provider_ref": provider_ref,
                       "amount_cents": amount_cents, "source": source, "source_id": source_id,
                       "applied_at": now}, separators=(",", ":"))


def decode_order(order_id: str, fields: Mapping[str, str]) -> Document:
    order: Document = {
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

    def __init__(self, client: redis.Redis, *, guard: bool = True, amount_check: bool = True,
                 tenant_check: bool = True, atomic_payment: bool = True,
                 atomic_recovery: bool = True, crash_points: CrashPoints | None = None) -> None:
        self.client = client
        self.guard = guard
        self.amount_check = amount_check
        self.tenant_check = tenant_check
        self.atomic_payment = atomic_payment  # False: the `domain-nonatomic` control
        self.atomic_recovery = atomic_recovery  # False: the `recovery-nonatomic` control
        self.crash_points = crash_points or CrashPoints(None, "app")
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
        return [sku for sku, created in zip(inventory, replies, strict=True) if int(created) == 1]

    def get_stock(self, sku: str) -> Document | None:
        fields = self.client.hgetall(inventory_key(sku))
        if not fields:
            return None
        return {"sku": sku, "available": int(fields["available"]),
                "added_total": int(fields.get("added_total", 0))}

    def put_stock(self, sku: str, available: int) -> Document:
        added = self._put_stock(keys=[inventory_key(sku), SKUS_INDEX], args=[sku, available])
        return {"sku": sku, "available": available, "added_total": int(added)}

    # orders ----------------------------------------------------------------
    def create_order(self, *, tenant: str, idempotency_key: str | None, sku: str, quantity: int,
                     amount_cents: int, currency: str,
                     recovery: IdempotencyContext | None = None) -> CreateResult:
        """Reserve stock and create the order in one script.

        With `recovery` (the API layer guards the request) the script also writes,
        with the order, a recovery point from (tenant, key) to the order id and the
        request fingerprint. A retry that runs the handler again, because the first
        response could not be recorded, then finds the order instead of creating
        another (`recovered`), and another request under the same key is refused
        (`mismatch`, the order is not returned).
        """
        order_id = "ord_" + uuid.uuid4().hex
        now = time.time()
        fields: dict[str, str | int] = {"id": order_id, "tenant": tenant, "idempotency_key": idempotency_key or "",
                  "sku": sku, "quantity": quantity, "amount_cents": amount_cents,
                  "currency": currency, "status": "INVENTORY_RESERVED", "created_at": repr(now)}
        flat: list[str | int] = []
        for name, value in fields.items():
            flat += [name, value]
        if recovery is not None:
            point = order_by_idempotency_key(recovery.tenant, recovery.key)
            ttl, fingerprint = max(1, recovery.ttl_seconds), recovery.fingerprint
        else:
            point, ttl, fingerprint = order_by_idempotency_key(tenant, ""), 0, ""
        outcome, found_id = self._create(
            keys=[inventory_key(sku), order_key(order_id), ORDERS_INDEX, point, COUNTERS],
            args=[quantity, order_id, ttl, fingerprint, "1" if self.atomic_recovery else "0", *flat],
        )
        self.crash_points.reach("domain.after_create")
        if outcome == "created" and ttl and not self.atomic_recovery:
            # The control: the recovery point is a second step, lost if this one fails.
            self.client.set(point, f"{order_id} {fingerprint}", ex=ttl)
        if outcome == "recovered":
            return CreateResult("recovered", self.get_order(str(found_id)))
        if outcome in ("mismatch", "unknown_sku", "out_of_stock"):
            return CreateResult(outcome)
        if outcome != "created":
            raise ValueError(f"order script answered {outcome!r}")
        order = decode_order(order_id, {k: str(v) for k, v in fields.items()})
        order["payments"] = []
        return CreateResult("created", order)

    def get_order(self, order_id: str, *, tenant: str | None = None) -> Document | None:
        """The order with its payments; None when unknown or, when `tenant` is given,
        owned by another tenant (counted as `tenant_refusals`)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(order_key(order_id))
        pipe.lrange(payments_key(order_id), 0, -1)
        fields, payments = pipe.execute()
        if not fields:
            return None
        order = decode_order(order_id, fields)
        if self.tenant_check and tenant is not None and order["tenant"] != tenant:
            self.incr_counter("tenant_refusals")
            return None
        order["payments"] = [json.loads(p) for p in payments]
        return order

    def mark_paid(self, order_id: str, *, provider_ref: str, amount_cents: int, source: str,
                  source_id: str, tenant: str | None = None) -> PaymentOutcome:
        """One atomic script; returns the outcome (see OUTCOME_STATUS). `tenant`: the
        caller's tenant (API); None for tenant-less callers (webhooks, messages)."""
        now = time.time()
        payment = payment_json(order_id, provider_ref, amount_cents, source, source_id, now)
        outcome = self._mark_paid(
            keys=[order_key(order_id), payments_key(order_id), COUNTERS],
            args=[provider_ref, amount_cents, payment,
                  repr(now), "1" if self.guard else "0", "1" if self.amount_check else "0",
                  tenant if tenant is not None and self.tenant_check else "",
                  "1" if self.atomic_payment else "0"],
        )
        self.crash_points.reach("domain.after_guard")
        if outcome == "paid" and not self.atomic_payment:
            # The control: the payment is a second step, lost if this one fails.
            self.client.rpush(payments_key(order_id), payment)
        return payment_outcome(outcome)

    def incr_counter(self, name: str, by: int = 1) -> None:
        self.client.hincrby(COUNTERS, name, by)
