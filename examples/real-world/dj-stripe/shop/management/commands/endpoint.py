"""`python manage.py endpoint <uuid> <secret>`: the WebhookEndpoint row dj-stripe's view
looks up by its uuid, with the signing secret (what syncing it from Stripe would store)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from djstripe.models import WebhookEndpoint


class Command(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("uuid")
        parser.add_argument("secret")

    def handle(self, *args: Any, **options: Any) -> None:
        WebhookEndpoint.objects.update_or_create(id="we_probe", defaults={
            "djstripe_uuid": options["uuid"], "secret": options["secret"], "livemode": False,
            "enabled_events": ["*"], "status": "enabled", "url": "http://127.0.0.1/stripe/webhook/",
            "api_version": ""})
