"""Stripe's test payment methods the provider knows, and what confirming with each does.

Stripe's test mode names ready-made payment methods `pm_card_*`; each behaves the same
every time, which makes a run repeatable. A `CardOutcome` is what a confirmation with
one gives: `succeeded` (a charge that moves money), `declined` (a failed charge and a
402 `card_error` with Stripe's `decline_code`), or `requires_action` (3-D Secure wanted:
no charge, the PaymentIntent waits in `requires_action`). `processing_error` is the
decline Stripe documents as worth retrying: the card was fine, the processing failed.
An unknown `pm_...` is a 400 `resource_missing`, as in Stripe.
"""

from __future__ import annotations

from dataclasses import dataclass

SUCCEEDED = "succeeded"
DECLINED = "declined"
REQUIRES_ACTION = "requires_action"


@dataclass(frozen=True)
class CardOutcome:
    payment_method: str
    result: str  # SUCCEEDED | DECLINED | REQUIRES_ACTION
    brand: str = "visa"
    last4: str = "4242"
    code: str | None = None  # the card_error code of a decline
    decline_code: str | None = None
    message: str = ""

    @property
    def retryable(self) -> bool:
        """A decline that may succeed when tried again (Stripe's advice for processing_error)."""
        return self.code == "processing_error"


def _ok(name: str, brand: str, last4: str) -> CardOutcome:
    return CardOutcome(name, SUCCEEDED, brand, last4)


def _declined(name: str, last4: str, code: str, decline_code: str, message: str) -> CardOutcome:
    return CardOutcome(name, DECLINED, "visa", last4, code=code, decline_code=decline_code, message=message)


_GENERIC = "Your card was declined."
CARDS: dict[str, CardOutcome] = {card.payment_method: card for card in (
    _ok("pm_card_visa", "visa", "4242"),
    _ok("pm_card_visa_debit", "visa", "5556"),
    _ok("pm_card_mastercard", "mastercard", "4444"),
    _ok("pm_card_mastercard_debit", "mastercard", "8210"),
    _ok("pm_card_amex", "amex", "8431"),
    _ok("pm_card_discover", "discover", "1117"),
    _declined("pm_card_chargeDeclined", "0002", "card_declined", "generic_decline", _GENERIC),
    _declined("pm_card_visa_chargeDeclined", "0341", "card_declined", "generic_decline", _GENERIC),
    _declined("pm_card_chargeDeclinedInsufficientFunds", "9995", "card_declined", "insufficient_funds",
              "Your card has insufficient funds."),
    _declined("pm_card_visa_chargeDeclinedInsufficientFunds", "9995", "card_declined", "insufficient_funds",
              "Your card has insufficient funds."),
    _declined("pm_card_chargeDeclinedLostCard", "9987", "card_declined", "lost_card", _GENERIC),
    _declined("pm_card_chargeDeclinedStolenCard", "9979", "card_declined", "stolen_card", _GENERIC),
    _declined("pm_card_chargeDeclinedFraudulent", "0019", "card_declined", "fraudulent", _GENERIC),
    _declined("pm_card_chargeDeclinedExpiredCard", "0069", "expired_card", "expired_card",
              "Your card has expired."),
    _declined("pm_card_chargeDeclinedIncorrectCvc", "0127", "incorrect_cvc", "incorrect_cvc",
              "Your card's security code is incorrect."),
    _declined("pm_card_chargeDeclinedProcessingError", "0119", "processing_error", "processing_error",
              "An error occurred while processing your card. Try again in a little bit."),
    CardOutcome("pm_card_authenticationRequired", REQUIRES_ACTION, "visa", "3184"),
    CardOutcome("pm_card_threeDSecure2Required", REQUIRES_ACTION, "visa", "3220"),
)}


def card_named(name: str) -> CardOutcome | None:
    return CARDS.get(name)
