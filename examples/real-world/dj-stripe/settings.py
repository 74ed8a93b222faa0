"""Settings of the minimal Django project that mounts dj-stripe 2.11.0's webhook view, read
from the environment so the probe's `service:` section (or a test) can point it anywhere:
DATABASE_URL (postgresql://user@host:port/name), STRIPE_API_BASE (where stripe-python
sends dj-stripe's API calls: the probe's provider), STRIPE_SECRET_KEY."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

_db = urlsplit(os.environ["DATABASE_URL"])

SECRET_KEY = "dj-stripe-probe-example"  # a throwaway project, never deployed
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "urls"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "djstripe", "shop"]
DATABASES = {"default": {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": _db.path.lstrip("/"), "USER": _db.username or "postgres", "PASSWORD": _db.password or "",
    "HOST": _db.hostname or "127.0.0.1", "PORT": str(_db.port or 5432),
}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# dj-stripe's documented settings: test mode, the key the provider accepts, signatures verified.
STRIPE_LIVE_MODE = False
STRIPE_TEST_SECRET_KEY = os.environ.get("STRIPE_SECRET_KEY", "sk_test_djstripeprobe0123456789abcd")
DJSTRIPE_WEBHOOK_VALIDATION = "verify_signature"
DJSTRIPE_FOREIGN_KEY_TO_FIELD = "id"
# dj-stripe sets stripe.api_base from STRIPE_API_HOST (djstripe/settings.py:43-44).
STRIPE_API_HOST = os.environ["STRIPE_API_BASE"]
LOGGING = {"version": 1, "handlers": {"console": {"class": "logging.StreamHandler"}},
           "root": {"handlers": ["console"], "level": "WARNING"}}
