"""Third-party Idempotency-Key middlewares from PyPI, probed as their users deploy them."""
