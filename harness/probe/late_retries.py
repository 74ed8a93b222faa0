"""After the load, once every fault has healed: retry what never succeeded.

Real clients retry later too, and that is when a stored failure shows: the service is
well again, so a request that was never answered with a 2xx runs now (or its stored
success is replayed), unless the service stored the 5xx and replays it, or left the
key stuck in flight. For every key (per identity) whose requests got no 2xx and whose
last answer was indeterminate (a 5xx, a timeout, a reset) or the in-flight status, the same request (same
key, body and identity) is sent once more, straight to the service, as kind
`late_retry` (`send_again`: one request sent again, recorded; harness.probe.aged_retries uses it too). First, one fresh request per endpoint (kind `first`, a new key) shows
the service answering again: the evidence that a repeated 5xx is a replay
(harness.probe.replays). A late retry refused as in flight with a `Retry-After` of at
most MAX_RETRY_AFTER seconds is sent once more when that time has passed: a claim
left by a request that died mid-way may block its key for a bounded lease (the draft
lets a server answer "in progress" until then), and only a key still refused after
its own stated wait is stuck. A clock fault moved back holds a request's timers
back by as much (harness.probe.replays.clock_hold): the retries wait until that hold
is over (`not_before`) when it ends within MAX_RETRY_AFTER seconds. Bounded in count and time; recorded in the run's
history like every other request, so every invariant judges them.
"""

from __future__ import annotations

import os
import random
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import requests

from harness.generators import render_path
from harness.history import Client, HistoryWriter, history_path
from harness.load.signing import fingerprint
from harness.probe.answers import classify
from harness.probe.config import Endpoint, ProbeConfig, render_body
from harness.probe.identities import request_headers

LATE_RETRY = "late_retry"
MAX_LATE_RETRIES = 300
LATE_BUDGET = 20.0  # seconds for all late retries together
SETTLE = 0.5  # seconds given to the service after the heal (reconnecting to its dependencies)
MAX_RETRY_AFTER = 60.0  # the longest Retry-After of an in-flight refusal the late retries wait out
OPERATION = "create_order"


def late_retries(config: ProbeConfig, upstream: str, operations: Sequence[Mapping[str, Any]],
                 history_dir: Path, *, not_before: float = 0.0) -> int:
    """Send the late retries (see the module docstring), none before the epoch time
    `not_before` if it is at most MAX_RETRY_AFTER away; how many were sent."""
    groups: dict[tuple[str, str, Any], list[Mapping[str, Any]]] = defaultdict(list)
    for op in operations:
        if op.get("op") == OPERATION and op.get("idempotency_key") is not None:
            groups[(str(op.get("endpoint")), str(op["idempotency_key"]), op.get("identity"))].append(op)
    endpoints = {endpoint.name: endpoint for endpoint in config.endpoints}
    pending = []
    for (name, key, identity), ops in groups.items():
        same = [op for op in ops if op.get("expect") != "payload_mismatch" and isinstance(op.get("body"), (dict, list))]
        if name not in endpoints or not same or any(op.get("type") == "ok" for op in same):
            continue
        last = max(same, key=lambda op: float(op.get("invoke_time") or 0.0))
        if last.get("type") == "info" or last.get("status") == endpoints[name].expect.in_flight:
            pending.append((endpoints[name], key, identity, last["body"], last.get("path")))
    if not pending:
        return 0
    hold = not_before - time.time()
    time.sleep(max(SETTLE, hold if hold <= MAX_RETRY_AFTER else 0.0))
    deadline = time.monotonic() + LATE_BUDGET
    token = os.urandom(3).hex()
    rng = random.Random(f"{config.load.seed}:late")
    with HistoryWriter(history_path(history_dir, worker="late")) as writer:
        client = Client(writer, worker="late", user=0)
        for n, endpoint in enumerate(config.endpoints):
            if any(item[0] is endpoint for item in pending):
                key = f"probe-late-{token}-{n}"
                send_again(client, config, upstream, endpoint, render_body(endpoint.body, rng, key=key), key=key,
                           identity=0 if config.identities else None, kind="first")
        sent = 0
        waited: list[tuple[float, tuple[Endpoint, str, Any, Any, Any]]] = []
        for item in pending[:MAX_LATE_RETRIES]:
            if time.monotonic() > deadline:
                break
            endpoint, key, identity, body, path = item
            response = send_again(client, config, upstream, endpoint, body, key=key, identity=identity,
                             kind=LATE_RETRY, path=path)
            sent += 1
            wait = _retry_after(response, endpoint)
            if wait is not None:
                waited.append((time.monotonic() + wait, item))
        # Keys refused as in flight with a bounded Retry-After: asked once more when it has passed.
        for due, (endpoint, key, identity, body, path) in sorted(waited, key=lambda pair: pair[0]):
            time.sleep(max(0.0, due - time.monotonic()))
            send_again(client, config, upstream, endpoint, body, key=key, identity=identity, kind=LATE_RETRY,
                  path=path)
            sent += 1
    return sent


def _retry_after(response: requests.Response | None, endpoint: Endpoint) -> float | None:
    """Seconds to wait before asking again, when `response` refused the key as in flight
    with a Retry-After (in seconds) of at most MAX_RETRY_AFTER; else None."""
    if response is None or response.status_code != endpoint.expect.in_flight:
        return None
    try:
        seconds = float(response.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return seconds + 0.2 if 0 <= seconds <= MAX_RETRY_AFTER else None


def send_again(client: Client, config: ProbeConfig, upstream: str, endpoint: Endpoint, body: Any, *, key: str,
          identity: int | None, kind: str, path: str | None = None) -> requests.Response | None:
    raw = orjson.dumps(body)  # the bytes the load sent: orjson writes one dict one way
    path = path or render_path(endpoint.path, random.Random(key), key=key)  # the load's path, or a fresh one
    headers = {"Content-Type": "application/json", **request_headers(config, endpoint, identity),
               config.key_header: key}
    fields: dict[str, Any] = {"endpoint": endpoint.name, "idempotency_key": key, "expect": kind,
                              "fingerprint": fingerprint(endpoint.method, path, raw), "body": body}
    if path != endpoint.path:
        fields["path"] = path
    if identity is not None:
        fields["identity"] = identity
    operation = client.invoke(OPERATION, **fields)
    timeout = config.load.client_timeout * 2
    try:
        response = requests.request(endpoint.method, f"http://{upstream}{path}", data=raw,
                                    headers=headers, timeout=(timeout, timeout))
    except requests.RequestException as error:
        operation.info(error=f"{type(error).__name__}: {error}"[:300], status=None)
        return None
    answer = classify(endpoint, response.status_code, response.headers, response.content)
    {"ok": operation.ok, "fail": operation.fail, "info": operation.info}[answer.completion](**answer.fields)
    return response
