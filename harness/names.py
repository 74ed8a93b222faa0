"""Names shared across modules and processes: one spelling each.

A name belongs here when two places must agree on it and a typo in one would not be
caught by an import: a default directory, an environment variable the harness sets
for a child process, a field another process writes or reads, a file one process
leaves for another. Plain constants only (stdlib imports), so a Locust process, the
supervisor and the checker can all import this module at no cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

# --- A stack's state ---------------------------------------------------------------

# Where a local stack keeps its state (state.json, logs) unless `--root` says otherwise.
DEFAULT_STACK_ROOT: Final = Path(".harness")
# The stack's description under its root, written by the supervisor, read by every
# command and by a load process that discovers the stack.
STATE_FILE: Final = "state.json"

# --- The environment of a load process (read by harness.load.settings) ----------------
# Each is the fallback of one `--harness-*` Locust option; the runner sets them for
# Locust and `harness status --env` prints them for a locustfile run by hand.

ENV_ROOT: Final = "HARNESS_ROOT"  # the stack to read; set but empty: read none
ENV_HISTORY_DIR: Final = "HARNESS_HISTORY_DIR"  # also read by the probe's Locust processes
ENV_REDIS_URL: Final = "HARNESS_REDIS_URL"
ENV_STREAM: Final = "HARNESS_STREAM"
ENV_WEBHOOK_SECRET: Final = "HARNESS_WEBHOOK_SECRET"
# The app's own variable for the same secret: the load falls back to it, and the
# runner sets it, so one value signs and verifies.
ENV_APP_WEBHOOK_SECRET: Final = "TARGET_APP_WEBHOOK_SECRET"
# The app's other variables that a stack sets or reads back (docs/target-app.md).
ENV_APP_REDIS_URL: Final = "TARGET_APP_REDIS_URL"
ENV_APP_INTERNAL_TOKEN: Final = "TARGET_APP_INTERNAL_TOKEN"
ENV_APP_STREAM: Final = "TARGET_APP_STREAM"
ENV_APP_GROUP: Final = "TARGET_APP_GROUP"
ENV_APP_UNSAFE_DISABLE: Final = "TARGET_APP_UNSAFE_DISABLE"
ENV_SEED: Final = "HARNESS_SEED"
ENV_FRESH_CONNECTIONS: Final = "HARNESS_FRESH_CONNECTIONS"
ENV_REQUEST_TIMEOUT: Final = "HARNESS_REQUEST_TIMEOUT"
ENV_THINK_TIME: Final = "HARNESS_THINK_TIME"
ENV_SKUS: Final = "HARNESS_SKUS"
ENV_TOXIPROXY_URL: Final = "HARNESS_TOXIPROXY_URL"
# The probe's resolved config (a JSON file), from `harness probe` to its Locust processes.
ENV_PROBE_CONFIG: Final = "PROBE_CONFIG_JSON"

# --- The app's payment stream ------------------------------------------------------

# The stream the consumers read and the load publishes to, and the consumers'
# group, unless the stack's settings name others (state.json's `stream`, `group`).
DEFAULT_STREAM: Final = "payments"
DEFAULT_GROUP: Final = "target-app"
# The fields of one payment message, as the load publishes it and the app's consumer
# reads it (every value sent as text).
MESSAGE_ID: Final = "message_id"
ORDER_ID: Final = "order_id"
PROVIDER_REF: Final = "provider_ref"
AMOUNT_CENTS: Final = "amount_cents"

# --- A run directory: what the load writes and the checker reads ---------------------

# The folder of the Jepsen histories, one `*.jsonl` file per load process.
HISTORIES_DIR: Final = "histories"
HISTORY_SUFFIX: Final = ".jsonl"
# Written into the history folder by the Locust process that drives the run when the
# load begins (after a master's workers all joined); the runner starts the fault
# plan's clock on it. Not a history: it does not end in HISTORY_SUFFIX.
LOAD_STARTED: Final = ".load-started"
# The nemesis's log of the faults it applied and healed (the runner's, the web UI's).
FAULT_LOG: Final = "faults.jsonl"
# The files that tell how far a run got, read by harness.stack.registry when it marks
# a run whose harness died (interrupted.json, and a result.json that says so).
SETTINGS_FILE: Final = "settings.json"
EXPORT_FILE: Final = "export.ndjson"
RESULT_FILE: Final = "result.json"
INTERRUPTED_FILE: Final = "interrupted.json"
