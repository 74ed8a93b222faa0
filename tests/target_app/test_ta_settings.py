"""Settings from the environment."""

from __future__ import annotations

import pytest

from target_app.errors import ConfigError
from target_app.settings import Settings


def test_defaults():
    settings = Settings.from_env({})
    assert settings.redis_url == "redis://127.0.0.1:6379/0"
    assert (settings.idempotency_ttl, settings.inflight_lease) == (86400, 30)
    assert (settings.stream, settings.group, settings.dead_letter_stream) == ("payments", "target-app", "payments-dead")
    assert settings.max_deliveries == 5 and settings.handler_delay_ms == 0
    assert dict(settings.inventory) == {"sku-1": 1000, "sku-2": 5}
    assert settings.unsafe_disable == frozenset()


def test_every_variable_is_read():
    env = {
        "TARGET_APP_REDIS_URL": "redis://h:1/2", "TARGET_APP_WEBHOOK_SECRET": "s",
        "TARGET_APP_IDEMPOTENCY_TTL": "60", "TARGET_APP_INFLIGHT_LEASE": "3",
        "TARGET_APP_UNSAFE_DISABLE": " api, inbox-nonatomic ", "TARGET_APP_STREAM": "st",
        "TARGET_APP_GROUP": "g", "TARGET_APP_DEAD_LETTER_STREAM": "dl", "TARGET_APP_MAX_DELIVERIES": "2",
        "TARGET_APP_RECLAIM_IDLE_MS": "100", "TARGET_APP_INVENTORY": "a=1, b=0",
        "TARGET_APP_MAX_BODY_BYTES": "1000", "TARGET_APP_CONSUMER_NAME": "c",
        "TARGET_APP_HANDLER_DELAY_MS": "250", "TARGET_APP_REDIS_TIMEOUT": "0.5",
        "TARGET_APP_CONSUMER_BLOCK_MS": "20", "TARGET_APP_CONSUMER_BATCH": "3",
    }
    s = Settings.from_env(env)
    assert (s.redis_url, s.webhook_secret, s.idempotency_ttl, s.inflight_lease) == ("redis://h:1/2", "s", 60, 3)
    assert s.unsafe_disable == {"api", "inbox-nonatomic"} and s.unsafe("api") and not s.unsafe("domain")
    assert (s.stream, s.group, s.dead_letter_stream, s.max_deliveries) == ("st", "g", "dl", 2)
    assert (s.reclaim_idle_ms, dict(s.inventory), s.max_body_bytes) == (100, {"a": 1, "b": 0}, 1000)
    assert (s.effective_consumer_name, s.handler_delay_ms, s.redis_timeout) == ("c", 250, 0.5)
    assert (s.consumer_block_ms, s.consumer_batch) == (20, 3)


@pytest.mark.parametrize("env", [
    {"TARGET_APP_UNSAFE_DISABLE": "api,everything"},
    {"TARGET_APP_IDEMPOTENCY_TTL": "soon"},
    {"TARGET_APP_INFLIGHT_LEASE": "0"},
    {"TARGET_APP_INVENTORY": "sku-1"},
    {"TARGET_APP_INVENTORY": "sku-1=-3"},
    {"TARGET_APP_REDIS_TIMEOUT": "nan"},
])
def test_bad_values_fail_at_startup(env):
    with pytest.raises(ConfigError):
        Settings.from_env(env)


def test_settings_are_frozen():
    with pytest.raises(AttributeError):
        Settings().redis_url = "x"  # type: ignore[misc]


def test_wsgi_entry_refuses_an_unknown_negative_control():
    import os
    import subprocess
    import sys

    from ta_helpers import ROOT

    env = {**os.environ, "TARGET_APP_UNSAFE_DISABLE": "api,nope", "TARGET_APP_REDIS_URL": "redis://127.0.0.1:1/0"}
    result = subprocess.run([sys.executable, "-c", "import target_app.wsgi"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode != 0
    assert "ConfigError" in result.stderr and "nope" in result.stderr


def test_internal_token_setting():
    assert Settings.from_env({}).internal_token == ""
    assert Settings.from_env({"TARGET_APP_INTERNAL_TOKEN": " s3cret "}).internal_token == "s3cret"
    assert Settings(max_deliveries=3).dead_letter_cap == 30
