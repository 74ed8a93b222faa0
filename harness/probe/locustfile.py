"""The locustfile of `harness probe` (the runner starts Locust with it).

By hand, after writing the resolved config as JSON:
    PROBE_CONFIG_JSON=config.json HARNESS_HISTORY_DIR=hist \\
        locust -f harness/probe/locustfile.py --host http://127.0.0.1:PORT
"""

from locust import events

from harness.probe.users import ProbeUser, install

install(events)


class IdempotencyClient(ProbeUser):
    """The concrete user Locust spawns."""
