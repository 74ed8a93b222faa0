"""The handler a team writes with dj-stripe's `djstripe_receiver`: books the payment of a
succeeded payment intent (one HandlerRun row per run)."""

from typing import Any

from djstripe.event_handlers import djstripe_receiver
from djstripe.models import Event

from shop.models import HandlerRun


@djstripe_receiver("payment_intent.succeeded")
def book_payment(sender: Any, event: Event, **kwargs: Any) -> None:
    HandlerRun.objects.create(event_id=event.id, intent_id=event.data["object"]["id"])
