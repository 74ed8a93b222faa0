"""One `messages:` entry of the probe config, checked: what the probe publishes, where.

    messages:
      - name: payments                  # unique; letters, digits, '.', '_', '-'
        broker: rabbitmq                # redis-streams | rabbitmq | nats
        url: amqp://guest:guest@127.0.0.1:5672/%2F
        management: http://guest:guest@127.0.0.1:15672   # rabbitmq: where its redelivery count is read
        queue: payments                 # the queue (rabbitmq), stream (redis) or subject (nats)
        dead_letter: payments.dead      # optional: where the consumer parks messages it gives up on
        body: {message_id: "{message_id}", payment: "pay-{uuid}", amount_cents: "{int:100-9999}"}
        fact: /payment                  # JSON pointer: the business fact that must take effect once
        count: 40                       # logical messages (each played as one of the kinds)
        drain_timeout: 15s              # after the load: how long the consumer may take to catch up
        effects: {dsn: ..., query: "SELECT count(*) FROM payments WHERE ref = :fact"}   # the caller's
        process: {name: broker, command: [...], env: {...}}   # optional: the probe owns and may restart it
        headers: {x-tenant: "t-{int:1-9}", x-trace: "{message_id}"}   # rabbitmq: AMQP headers (templates)
        properties: {type: payment.created, correlation_id: "{uuid}", priority: 5}   # rabbitmq: AMQP properties

`headers:` and `properties:` (RabbitMQ's plain entries only) are templates like the
body, rendered once per logical message: every copy of it carries the same values, and
a copy under a new id (`same_fact_new_id`) gets its `{message_id}` in them renamed.
Properties are AMQP's basic properties the consumer may read (PROPERTIES);
`message_id`, `delivery_mode` and `headers` are the probe's own (the id, persistent,
and the headers above plus `x-probe-kind`). A header named `x-probe-kind` is refused.

A Celery task instead of a JSON body (`protocol: celery`, docs/celery.md):

      - name: charges
        broker: rabbitmq                # rabbitmq (amqp://) or redis-streams (redis://: kombu's list transport)
        protocol: celery                # plain (default): the JSON `body`; celery: a Celery protocol v2 task
        url: amqp://guest:guest@127.0.0.1:5672//
        queue: celery                   # default celery
        task: shop.charge               # the registered task name (required with celery)
        args: ["ord-{uuid}"]            # a list template (default [])
        kwargs: {amount_cents: "{int:100-9999}"}   # a mapping template (default {})
        fact: /args/0                   # a pointer into {"args": [...], "kwargs": {...}}

With `protocol: celery` there is no `body`: the message's body is `{"args": ...,
"kwargs": ...}` to the producer and the fact's pointer, and the broker adapter
(harness.probe.brokers.celery) publishes it as a Celery task whose id is the
message id. `headers:` and `properties:` are not taken (Celery's own layout is used).

`process:` (harness.probe.brokers.process) makes the broker the probe's own: started
before the consumer, stopped after it, and a target of the plan's process faults by
its `name` (a broker restart: `{process: {action: restart, service: broker}}`).

`body` is a template of the body generators (harness.generators); `{message_id}` is the
message's id, the same for every copy of one message, and also the broker's own id of
it (AMQP `message_id`, `Nats-Msg-Id`, a `message_id` field of the stream entry). The
fact must be generated (it must differ between messages) and must not contain the
message id (a copy under a new id keeps its fact). `effects` is checked by the caller
(harness.probe.config, with the endpoints' oracles), passed in `also=`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from harness.fieldcheck import FieldChecker
from harness.generators import is_generated, render_body
from harness.probe.brokers import BROKERS, BrokerTarget
from harness.probe.brokers.process import BrokerProcessConfig, parse_broker_process

MESSAGE_ID = "{message_id}"
KEYS = ("name", "broker", "url", "management", "queue", "dead_letter", "body", "fact", "count", "drain_timeout",
        "process", "protocol", "task", "args", "kwargs", "headers", "properties")
# The AMQP basic properties an entry may set (`message_id`, `delivery_mode` and
# `headers` are the probe's own); `priority` is a whole number 0-255, the rest text.
PROPERTIES = ("content_type", "content_encoding", "correlation_id", "reply_to", "expiration", "type", "app_id",
              "user_id", "priority")
_HEADER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
PROTOCOLS = ("plain", "celery")
CELERY_BROKERS = ("rabbitmq", "redis-streams")  # the brokers Celery's kombu can use that the probe starts
CELERY_QUEUE = "celery"
URL_SCHEMES = {"rabbitmq": ("amqp",), "nats": ("nats",), "redis-streams": ("redis",)}
DEFAULT_COUNT = 40
MAX_COUNT = 5000
DEFAULT_DRAIN = 15.0
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_QUEUE = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")


@dataclass(frozen=True)
class MessageSpec:
    name: str
    broker: str
    url: str
    queue: str
    body: Any
    fact: str
    count: int = DEFAULT_COUNT
    drain_timeout: float = DEFAULT_DRAIN
    dead_letter: str | None = None
    management: str | None = None
    process: BrokerProcessConfig | None = None  # the broker's process, when the probe owns it
    protocol: str = "plain"
    task: str | None = None  # protocol celery: the registered task name
    headers: dict[str, Any] | None = None  # rabbitmq: AMQP header templates
    properties: dict[str, Any] | None = None  # rabbitmq: AMQP property templates (PROPERTIES)

    @property
    def target(self) -> BrokerTarget:
        return BrokerTarget(broker=self.broker, url=self.url, queue=self.queue, dead_letter=self.dead_letter,
                            management=self.management, protocol=self.protocol, task=self.task)

    def render(self, rng: random.Random, message_id: str) -> Any:
        """A body of the template: fresh generated values, `{message_id}` filled."""
        return render_body(_with_key(self.body), rng, key=message_id)

    def render_envelope(self, rng: random.Random, message_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The headers and properties of one message (nothing drawn from `rng` without them)."""
        rendered = []
        for template in (self.headers, self.properties):
            rendered.append(dict(render_body(_with_key(template), rng, key=message_id)) if template else {})
        return rendered[0], rendered[1]

    def to_raw(self) -> dict[str, Any]:
        raw: dict[str, Any] = {"name": self.name, "broker": self.broker, "url": self.url, "queue": self.queue,
                               "body": self.body, "fact": self.fact, "count": self.count,
                               "drain_timeout": self.drain_timeout}
        raw.update({key: value for key, value in (("dead_letter", self.dead_letter), ("management", self.management),
                                                  ("headers", self.headers), ("properties", self.properties))
                    if value is not None})
        if self.process is not None:
            raw["process"] = self.process.to_raw()
        if self.protocol == "celery":
            raw.pop("body")
            raw.update(protocol="celery", task=self.task, args=self.body["args"], kwargs=self.body["kwargs"])
        return raw


def _with_key(template: Any) -> Any:
    """The template with `{message_id}` spelled as the generators' `{key}`."""
    if isinstance(template, dict):
        return {name: _with_key(value) for name, value in template.items()}
    if isinstance(template, list):
        return [_with_key(value) for value in template]
    if isinstance(template, str):
        return template.replace(MESSAGE_ID, "{key}")
    return template


def fact_of(body: Any, pointer: str) -> Any:
    """The value at JSON pointer `pointer` in `body`; KeyError when it is not there."""
    value = body
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(pointer)
    return value


def _celery_body(where: FieldChecker, item: dict[str, Any], path: str, broker: str) -> tuple[str, dict[str, Any]]:
    """The task name and the `{"args": ..., "kwargs": ...}` template of a celery entry."""
    if broker not in CELERY_BROKERS:
        raise where.error(f"{path}.protocol", f"celery runs on {' or '.join(CELERY_BROKERS)} here, not {broker!r}")
    if "body" in item:
        raise where.error(f"{path}.body", "is not taken with protocol celery: give args: and kwargs:")
    task = item.get("task")
    if task is None:
        raise where.error(f"{path}.task", "is required with protocol celery: the registered task name")
    if not isinstance(task, str) or not _NAME.match(task):
        raise where.error(f"{path}.task", f"must be a registered task name like shop.charge, not {task!r}")
    args = item.get("args", [])
    if not isinstance(args, list):
        raise where.error(f"{path}.args", "must be a list (a template of the task's positional arguments)")
    kwargs = item.get("kwargs", {})
    if not isinstance(kwargs, dict) or not all(isinstance(key, str) for key in kwargs):
        raise where.error(f"{path}.kwargs", "must be a mapping of names (a template of the task's keyword arguments)")
    return task, {"args": args, "kwargs": kwargs}


def parse_message(where: FieldChecker, raw: Any, path: str, *, also: Sequence[str] = ()) -> MessageSpec:
    protocol = raw.get("protocol", "plain") if isinstance(raw, dict) else "plain"
    if protocol not in PROTOCOLS:
        raise where.error(f"{path}.protocol", f"must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
    required = ("broker", "url", "fact") if protocol == "celery" else ("broker", "url", "queue", "body", "fact")
    item = dict(where.mapping(raw, path, required=required,
                              optional=(*[k for k in KEYS if k not in required], *also)))
    if protocol == "plain":
        for key in ("task", "args", "kwargs"):
            if key in item:
                raise where.error(f"{path}.{key}", "is taken only with protocol: celery")
    name = item.get("name", f"messages-{path.split('[')[-1].rstrip(']')}")
    if not isinstance(name, str) or not _NAME.match(name):
        raise where.error(f"{path}.name", f"must be letters, digits, '.', '_' or '-', not {name!r}")
    broker = item["broker"]
    if broker not in BROKERS:
        raise where.error(f"{path}.broker", f"must be one of {', '.join(BROKERS)}, not {broker!r} "
                          "(no Kafka adapter: see docs/probe.md)")
    url = item["url"]
    if not isinstance(url, str) or urlsplit(url).scheme not in URL_SCHEMES[broker] or not urlsplit(url).hostname:
        raise where.error(f"{path}.url", f"must be a {URL_SCHEMES[broker][0]}://host:port URL for {broker}, "
                          f"not {url!r}")
    task: str | None = None
    if protocol == "celery":
        task, item["body"] = _celery_body(where, item, path, broker)
        item.setdefault("queue", CELERY_QUEUE)
    queues: dict[str, str | None] = {}
    for key in ("queue", "dead_letter"):
        value = item.get(key)
        if value is not None and (not isinstance(value, str) or not _QUEUE.match(value)):
            raise where.error(f"{path}.{key}", f"must be a queue, stream or subject name, not {value!r}")
        queues[key] = value
    management = item.get("management")
    if management is not None:
        if broker != "rabbitmq":
            raise where.error(f"{path}.management", "is RabbitMQ's management API; other brokers report "
                              "their redeliveries themselves")
        if not isinstance(management, str) or urlsplit(management).scheme not in ("http", "https"):
            raise where.error(f"{path}.management", f"must be the management API's http:// URL, not {management!r}")
    body = item["body"]
    if not isinstance(body, (dict, list)):
        raise where.error(f"{path}.body", "must be a JSON object or list (a template)")
    fact = item["fact"]
    if not isinstance(fact, str) or not fact.startswith("/"):
        raise where.error(f"{path}.fact", f"must be a JSON pointer into the body like /payment, not {fact!r}")
    try:
        template_fact = fact_of(body, fact)
    except KeyError:
        where_in = 'the {"args": [...], "kwargs": {...}} of the task' if protocol == "celery" else "the body template"
        raise where.error(f"{path}.fact", f"{fact!r} is not in {where_in}") from None
    if not is_generated(template_fact) and not (isinstance(template_fact, str) and "{uuid}" in template_fact):
        raise where.error(f"{path}.fact", f"the fact at {fact!r} must be generated ({{uuid}}, {{int:A-B}}, ...): "
                          "every message needs a fact of its own")
    if isinstance(template_fact, str) and MESSAGE_ID in template_fact:
        raise where.error(f"{path}.fact", "must not contain {message_id}: a copy under a new id keeps its fact")
    count = where.integer(item.get("count", DEFAULT_COUNT), f"{path}.count", minimum=1)
    if count > MAX_COUNT:
        raise where.error(f"{path}.count", f"at most {MAX_COUNT} messages per run, not {count}")
    drain = where.duration(item.get("drain_timeout", DEFAULT_DRAIN), f"{path}.drain_timeout")
    if drain <= 0:
        raise where.error(f"{path}.drain_timeout", "must be longer than 0s")
    process = (parse_broker_process(where, item["process"], f"{path}.process", url)
               if item.get("process") is not None else None)
    headers, properties = _envelope(where, item, path, broker, protocol)
    return MessageSpec(name=name, broker=broker, url=url, queue=str(queues["queue"]), body=body, fact=fact, count=count,
                       drain_timeout=drain, dead_letter=queues["dead_letter"], management=management,
                       process=process, protocol=protocol, task=task, headers=headers, properties=properties)


def _envelope(where: FieldChecker, item: dict[str, Any], path: str, broker: str,
              protocol: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The entry's `headers:` and `properties:` templates, checked."""
    found: list[dict[str, Any] | None] = []
    for key in ("headers", "properties"):
        raw = item.get(key)
        if raw is None:
            found.append(None)
            continue
        if protocol == "celery":
            raise where.error(f"{path}.{key}", "is not taken with protocol celery: Celery's own layout is sent")
        if broker != "rabbitmq":
            raise where.error(f"{path}.{key}", f"is AMQP's, taken on broker rabbitmq only, not {broker!r}")
        if not isinstance(raw, dict) or not raw:
            raise where.error(f"{path}.{key}", "must be a mapping of names to templates")
        for name, value in raw.items():
            field_path = f"{path}.{key}.{name}"
            if key == "headers" and (not isinstance(name, str) or not _HEADER.match(name)):
                raise where.error(field_path, "must be a header name: letters, digits, '.', '_' or '-'")
            if key == "headers" and name.lower() == "x-probe-kind":
                raise where.error(field_path, "is the probe's own header (the kind of each copy)")
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise where.error(field_path, f"must be text or a whole number (a template), not {value!r}")
            if key == "properties" and name not in PROPERTIES:
                raise where.error(field_path, f"is not one of the properties an entry sets: {', '.join(PROPERTIES)} "
                                  "(message_id, delivery_mode and headers are the probe's)")
            if key == "properties" and name == "priority" and not (isinstance(value, int) and 0 <= value <= 255):
                raise where.error(field_path, f"must be a whole number from 0 to 255, not {value!r}")
            if key == "properties" and name != "priority" and not isinstance(value, str):
                raise where.error(field_path, f"must be text (a template), not {value!r}")
        found.append(dict(raw))
    return found[0], found[1]
