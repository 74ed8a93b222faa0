"""The names a run is made of: the scenarios (one locustfile each), the negative
controls a run can switch on (`TARGET_APP_UNSAFE_DISABLE`), the protective paths
the checker counts, and which paths each scenario promises to exercise.

The harness keeps its own copy of the control names rather than importing the
target app (it must be able to judge a service it does not import); a test checks
that this list and the app's `UNSAFE_LAYERS` agree. Likewise for the crash points
(`CRASH_POINTS`, the app's `target_app.crashpoints.POINTS`): a point is armed by
name through the app's internal endpoints (docs/target-app.md, "Crash points").
"""

from __future__ import annotations

SCENARIOS = ("timeout_replay", "duplicate_webhooks", "redelivered_messages", "mixed")

# Each negative control breaks one rule the target app documents (docs/target-app.md).
MUTANT_RULES: dict[str, str] = {
    "api": "the Idempotency-Key layer exists at all",
    "api-fingerprint": "a key reused with another request is refused, not replayed",
    "api-tenant": "idempotency records are scoped by tenant",
    "incomplete-body": "a request body cut off in transit is never handled nor stored",
    "order-tenant": "an order is visible and payable only by its own tenant",
    "domain": "an order is paid at most once (state and provider_ref guard)",
    "domain-amount": "a payment must carry the order's amount",
    "webhook-signature": "a webhook is applied only with a valid, fresh signature",
    "inbox": "a message id takes effect at most once",
    "inbox-nonatomic": "the inbox marks a message in the same step as its effect",
    "inbox-dead-letter": "crashes and transient errors never dead-letter a valid payment",
    "consumer-ack-early": "a message is acknowledged only after its effect is applied",
    "domain-nonatomic": "an order is marked PAID in the same step as its payment is recorded",
    "recovery-nonatomic": "an order's recovery point is written in the same step as the order",
    "lease-wall-clock": "an in-flight lease is measured on Redis's clock, whatever the app's clock does",
}
MUTANTS = tuple(MUTANT_RULES)
# The controls the smoke job runs no cell for, each with the reason; every other
# control has one (harness.run.smoke.MUTANT_CASES, held to it by tests/test_catalog.py).
SMOKE_EXEMPT: dict[str, str] = {
    "lease-wall-clock": "its rule breaks only while the app's clock jumps, and the smoke job's shared "
                        "stacks run no fake clock; and its second order needs recovery-nonatomic beside it "
                        "(the atomic recovery point answers the duplicate with the first order): "
                        "tests/e2e/test_lease_clock.py runs it under the plan lease-clock-jumps",
}

# Every crash point of the target app: name -> (layer, process). The layer is the
# app's (api, domain, webhook, message), the process the one the point fires in
# (`app`: a gunicorn worker; `consumer`: a stream consumer). docs/target-app.md says
# what state a crash at each one leaves.
CRASH_POINTS: dict[str, tuple[str, str]] = {
    "api.after_claim": ("api", "app"),
    "api.after_domain": ("api", "app"),
    "api.after_store": ("api", "app"),
    "domain.after_create": ("domain", "app"),
    "domain.after_guard": ("domain", "app"),
    "webhook.after_verify": ("webhook", "app"),
    "webhook.after_apply": ("webhook", "app"),
    "consumer.after_read": ("message", "consumer"),
    "consumer.after_reclaim": ("message", "consumer"),
    "consumer.after_effect": ("message", "consumer"),
    "consumer.after_inbox_mark": ("message", "consumer"),
    "consumer.after_ack": ("message", "consumer"),
}

# For each negative control whose rule a failure between two steps breaks: the crash
# points that, armed (probability 0.3-0.5) with the action CONTROL_CRASH_ACTIONS
# names (`crash` unless it names another), make its violation happen on every run.
CONTROL_CRASH_POINTS: dict[str, tuple[str, ...]] = {
    "inbox-nonatomic": ("consumer.after_effect",),
    "inbox-dead-letter": ("consumer.after_read",),
    "consumer-ack-early": ("consumer.after_ack",),
    "domain-nonatomic": ("domain.after_guard",),
    "recovery-nonatomic": ("domain.after_create",),
}
# The action for a control's points when it is not `crash`: a crash after the order
# script leaves its key in flight until the lease ends, later than any retry of the
# load, while a transient error (503) releases the key and the client's retry re-runs
# the handler at once. inbox-dead-letter's transient error leaves the entry in hand
# pending, so its redelivery (a reclaim a second later) is parked: a firing each pass,
# where a crash waited for the consumer to come back (on a busy machine three
# crashes in a cell, each batch's facts applied through other copies: missed).
CONTROL_CRASH_ACTIONS: dict[str, str] = {
    "recovery-nonatomic": "error",
    "inbox-dead-letter": "error",
}

# Every protective path the checker counts, from the app's counters and the history.
PATHS = (
    "replay", "fingerprint_refusal", "inflight_refusal", "recovery_point", "incomplete_body",
    "already_paid", "conflict", "amount_refusal", "signature_refusal", "tenant_refusal",
    "inbox_skip", "reclaim", "dead_letter",
)

# What each scenario provokes whatever the fault plan: a run that exercised one of
# these zero times proved nothing about it, so its verdict is inconclusive.
SCENARIO_PROMISES: dict[str, tuple[str, ...]] = {
    "timeout_replay": ("replay", "fingerprint_refusal", "tenant_refusal"),
    "duplicate_webhooks": ("already_paid", "conflict", "amount_refusal", "signature_refusal"),
    "redelivered_messages": ("inbox_skip",),
    "mixed": ("replay", "already_paid", "signature_refusal", "inbox_skip"),
}

# Fewer acknowledged (ok) operations than this and a run cannot be called a pass:
# a run in which nothing was acknowledged proves nothing.
DEFAULT_MIN_ACKNOWLEDGED = 20
