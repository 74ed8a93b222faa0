"""The probe's Locust users: the duplicates real clients make, recorded as a history.

Runs inside Locust (gevent), loaded by `harness/probe/locustfile.py`. Each round
picks an endpoint, makes a fresh Idempotency-Key and body from its template, and
plays one client:

- `first`: the request, possibly with an impatient read timeout, so the answer is
  lost after the server may have committed; then retries with the same key and
  body after an indeterminate answer (`retry_after_timeout`) or an in-flight
  refusal (`retry_after_inflight`);
- `double_click`: two submissions of the same key and body at once, on two
  connections (each branch is its own Jepsen process and retries on its own);
- `replay`: the same key and body again after a success;
- `payload_mismatch`: the key reused with another body (one field changed);
- `missing_key`: a fresh body without the key header;
- with `identities:`, each user speaks as one identity (its headers on every request)
  and with share `cross_identity` reuses its key and body as another identity, one
  after the other (`other_identity`) or at once (`other_identity_concurrent`).

Every request is one invoke and one completion (harness.history): `ok` for 2xx,
`fail` for 4xx, `info` for anything else (timeout, reset, 5xx, unparsable answer).
The completion carries the status, the resource id found where the config says,
a digest of the answer (canonical JSON when it parses) and the first bytes of the
body as evidence. Settings come from the environment (`PROBE_CONFIG_JSON`, the
resolved config as a JSON file; `HARNESS_HISTORY_DIR`); the host is Locust's.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
import orjson
import requests
from locust import User, between, task  # first: Locust monkey-patches ssl before requests loads it
from locust.env import Environment
from locust.event import Events
from locust.runners import MasterRunner

from harness.generators import render_path
from harness.history import Client, HistoryWriter, history_path
from harness.load.recording import Completion, listen, recorded_operation
from harness.load.run_time import install_run_time
from harness.load.signing import fingerprint
from harness.probe.answers import CONFIG_ENV, HISTORY_ENV, classify
from harness.probe.config import Endpoint, ProbeConfig, mutate_body, parse_config, render_body
from harness.probe.identities import other_identity, request_headers

# The impatient client sends the whole request, then waits this long for the answer:
# long enough that the request reached the server, short enough to lose the answer.
IMPATIENT_READ_TIMEOUT = 0.02
_ATTRIBUTE = "harness_probe_process"
OPERATION = "create_order"  # the history's name for a request that creates something


@dataclass(frozen=True)
class Reply:
    completion: str  # ok | fail | info
    status: int | None
    resource_id: str | None
    retry_after: bool


class ProbeProcess:
    """What the users of one Locust process share: the config, the history writer."""

    def __init__(self, config: ProbeConfig, history_dir: Path | None) -> None:
        self.config = config
        self.worker = f"probe{os.getpid()}"
        self.token = os.urandom(3).hex()
        self.writer = HistoryWriter(history_path(history_dir, worker=self.worker)) if history_dir else None
        self._users = itertools.count(1)
        self._flusher = gevent.spawn(self._flush_forever) if self.writer else None

    def new_client(self) -> Client:
        return Client(self.writer, worker=self.worker, user=next(self._users))

    def close(self) -> None:
        if self._flusher is not None:
            self._flusher.kill(block=False)
            self._flusher = None
        if self.writer is not None:
            self.writer.close()

    def _flush_forever(self) -> None:
        while True:
            gevent.sleep(1.0)
            if self.writer is not None:
                self.writer.flush()


def install(events: Events) -> None:
    """Give each load process its ProbeProcess at init; close the history at the end."""

    def on_init(environment: Environment, **_: Any) -> None:
        if isinstance(environment.runner, MasterRunner):
            return
        config_path = os.environ.get(CONFIG_ENV, "")
        if not config_path:
            raise RuntimeError(f"{CONFIG_ENV} is not set: run the probe with `harness probe`")
        config = parse_config(orjson.loads(Path(config_path).read_bytes()), source=config_path)
        history = os.environ.get(HISTORY_ENV, "").strip()
        setattr(environment, _ATTRIBUTE, ProbeProcess(config, Path(history) if history else None))

    def on_stop(environment: Environment, **_: Any) -> None:
        process = getattr(environment, _ATTRIBUTE, None)
        if process is not None:
            process.close()

    install_run_time(events)  # `harness probe` starts Locust with --harness-run-time
    listen(events.init, on_init)
    listen(events.quitting, on_stop)


class Sender:
    """One Jepsen process's requests: one invoke and one completion each."""

    def __init__(self, client: Client, config: ProbeConfig, host: str, events: Events,
                 identity: int | None = None) -> None:
        self.client = client
        self.config = config
        self.host = host.rstrip("/")
        self.events = events
        self.identity = identity  # index into config.identities; None without identities

    def send(self, endpoint: Endpoint, body: Any, *, key: str | None, kind: str, round_id: str,
             impatient: bool = False, path: str | None = None) -> Reply:
        raw_body = orjson.dumps(body)
        path = path or endpoint.path  # rendered once per logical request (generators in `path`)
        headers = {"Content-Type": "application/json", **request_headers(self.config, endpoint, self.identity)}
        if key is not None:
            headers[self.config.key_header] = key
        timeout = self.config.load.client_timeout

        def call() -> Completion[Reply]:
            # A new session per request: a new TCP connection, so the proxy decides each
            # toxic's toxicity per request, as it would for separate clients.
            with requests.Session() as session:
                response = session.request(
                    endpoint.method, self.host + path, data=raw_body, headers=headers,
                    timeout=(timeout, IMPATIENT_READ_TIMEOUT if impatient else timeout))
                raw = response.content
            kind_, reply, fields = _classify(endpoint, response, raw)
            # An indeterminate answer is a Locust failure, so its statistics mean something.
            failure = RuntimeError(f"HTTP {reply.status}") if kind_ == "info" else None
            return Completion(kind_, reply, fields, 0, failure)

        recorded = recorded_operation(
            self.client, self.events, call, op=OPERATION, request_type=endpoint.method,
            name=f"{endpoint.name} [{kind}]", expect=kind,
            fields={"endpoint": endpoint.name, "idempotency_key": key, "round": round_id,
                    "fingerprint": fingerprint(endpoint.method, path, raw_body),
                    **({"identity": self.identity} if self.identity is not None else {}),
                    **({"path": path} if path != endpoint.path else {}),
                    "body": body},  # what a late retry resends, what an oracle binds
            unanswered={"status": None})
        return recorded.value if recorded.value is not None else Reply("info", None, None, False)


def _classify(endpoint: Endpoint, response: requests.Response,
              raw: bytes) -> tuple[str, Reply, dict[str, Any]]:
    """The completion of one answer, the Reply the user acts on, the completion's fields."""
    answer = classify(endpoint, response.status_code, response.headers, raw)
    return answer.completion, Reply(answer.completion, answer.status, answer.resource_id,
                                    answer.retry_after), answer.fields


class ProbeUser(User):
    """One client of the service under probe; see the module docstring for a round."""

    abstract = True
    wait_time = between(0.0, 0.05)

    def on_start(self) -> None:
        process: ProbeProcess = getattr(self.environment, _ATTRIBUTE)
        self.process = process
        self.config = process.config
        client = process.new_client()
        self.rng = random.Random(f"{self.config.load.seed}:{client.user}")
        count = len(self.config.identities)
        identity = (client.user - 1) % count if count else None
        self.sender = Sender(client, self.config, self.host or "", self.environment.events, identity)
        self.twin = Sender(process.new_client(), self.config, self.host or "", self.environment.events, identity)
        # Another identity reusing this user's keys (None without identities).
        stranger = other_identity(self.config, identity)
        self.stranger = (Sender(process.new_client(), self.config, self.host or "", self.environment.events,
                                stranger) if stranger is not None else None)
        self.rounds = itertools.count(1)

    @task
    def probe_round(self) -> None:
        endpoint = self.rng.choice(self.config.endpoints)
        mix = self.config.load.mix
        round_id = f"{self.process.token}-{self.sender.client.user}-{next(self.rounds)}"
        key = f"probe-{round_id}"
        body = render_body(endpoint.body, self.rng, key=key)
        path = render_path(endpoint.path, self.rng, key=key)  # retries and duplicates resend it
        stranger = self.stranger if self.stranger is not None and self.rng.random() < mix["cross_identity"] else None
        concurrent_stranger = stranger is not None and self.rng.random() < 0.5
        if stranger is not None and concurrent_stranger:
            replies = self._concurrently([
                (self.sender, lambda s: self._with_retries(s, endpoint, body, key, "first", round_id, path=path)),
                (stranger, lambda s: self._with_retries(s, endpoint, body, key, "other_identity_concurrent",
                                                         round_id, path=path)),
            ])[:1]
        elif self.rng.random() < mix["double_click"]:
            replies = self._concurrently([
                (self.sender, lambda s: self._with_retries(s, endpoint, body, key, "double_click", round_id, path=path)),
                (self.twin, lambda s: self._with_retries(s, endpoint, body, key, "double_click", round_id, path=path)),
            ])
        else:
            impatient = self.rng.random() < mix["impatient"]
            replies = [self._with_retries(self.sender, endpoint, body, key, "first", round_id,
                                          impatient=impatient, path=path)]
        if stranger is not None and not concurrent_stranger:
            self._with_retries(stranger, endpoint, body, key, "other_identity", round_id, path=path)
        if any(isinstance(r, Reply) and r.completion == "ok" for r in replies):
            if self.rng.random() < mix["replay"]:
                self.sender.send(endpoint, body, key=key, kind="replay", round_id=round_id, path=path)
            if self.rng.random() < mix["payload_mismatch"]:
                other = mutate_body(endpoint.body, body, endpoint, self.rng)
                self.sender.send(endpoint, other, key=key, kind="payload_mismatch", round_id=round_id, path=path)
        if self.rng.random() < mix["missing_key"]:
            fresh = render_body(endpoint.body, self.rng, key=None)
            self.sender.send(endpoint, fresh, key=None, kind="missing_key", round_id=round_id,
                             path=render_path(endpoint.path, self.rng, key=None))

    def _with_retries(self, sender: Sender, endpoint: Endpoint, body: Any, key: str, kind: str,
                      round_id: str, *, impatient: bool = False, path: str | None = None) -> Reply:
        reply = sender.send(endpoint, body, key=key, kind=kind, round_id=round_id, impatient=impatient, path=path)
        for attempt in range(1, self.config.load.max_attempts):
            if reply.completion == "info":
                kind = "retry_after_timeout"
            elif reply.retry_after:
                kind = "retry_after_inflight"
            else:
                break
            # Exponential backoff with full jitter, as a well-behaved client retries.
            gevent.sleep(min(0.5, 0.025 * 2 ** attempt) * (0.5 + self.rng.random()))
            reply = sender.send(endpoint, body, key=key, kind=kind, round_id=round_id, path=path)
        return reply

    def _concurrently(self, branches: list[tuple[Sender, Callable[[Sender], Reply]]]) -> list[Any]:
        greenlets = [gevent.spawn(call, sender) for sender, call in branches]
        limit = self.config.load.max_attempts * (2 * self.config.load.client_timeout + 0.6) + 1.0
        gevent.joinall(greenlets, timeout=limit)
        for (sender, _), greenlet in zip(branches, greenlets, strict=True):
            if not greenlet.ready():
                greenlet.kill(block=True, timeout=1.0)
                sender.client.abandon()
        return [greenlet.value for greenlet in greenlets]
