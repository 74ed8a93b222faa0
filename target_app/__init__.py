"""The system under test: a payments API with three idempotency layers on Redis."""
