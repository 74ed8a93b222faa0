"""HandlerRun: one row per run of the handler, keyed by nothing on purpose (the probe
counts the rows of a payment intent: more than one is a handler that ran twice)."""

from django.db import models


class HandlerRun(models.Model):
    event_id = models.CharField(max_length=255)
    intent_id = models.CharField(max_length=255, db_index=True)
    created = models.DateTimeField(auto_now_add=True)
