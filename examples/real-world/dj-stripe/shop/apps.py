"""Connects the handler when Django starts."""

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "shop"

    def ready(self) -> None:
        from shop import handlers  # noqa: F401  (registers the receiver)
