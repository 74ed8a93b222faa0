"""The names a run is made of: the scenarios (one locustfile each) and the layers a
negative control can disable (`TARGET_APP_UNSAFE_DISABLE`)."""

from __future__ import annotations

SCENARIOS = ("timeout_replay", "duplicate_webhooks", "redelivered_messages", "mixed")
MUTANTS = ("api", "domain", "inbox", "inbox-nonatomic")
