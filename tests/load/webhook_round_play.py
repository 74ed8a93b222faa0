"""Two provider rounds (harness.load.flows.webhook_round) with a fake actor, run as a
script by tests/load/test_webhook_round.py: Locust monkey-patches the process that
imports it, so never in the test process. Prints one JSON line: the `expect` of each
copy each round sent, and the delayed copies left after each.

The second round's first copy's delay runs out late in that round (while it sends its
conflicting copy), as on a busy machine where a round takes longer than the 0.2-1.5 s
a copy waits."""

from __future__ import annotations

import itertools
import json
import random
import sys
from collections import deque
from types import SimpleNamespace
from typing import Any

import locust  # noqa: F401 - first: its gevent patching before anything imports ssl

from harness.load import flows  # noqa: E402 - after Locust's patching
from harness.load.actor import Order  # noqa: E402


def main() -> None:
    ids = itertools.count(1)
    actor = SimpleNamespace(rng=random.Random(3), delayed=deque(), new_id=lambda kind: f"{kind}-{next(ids)}",
                            settings=SimpleNamespace(request_timeout=1.0))
    actor.twins = lambda count: [actor] * count
    sent: list[str] = []
    falls_due = [False]

    def send_webhook(sender: Any, payload: dict[str, Any], **fields: Any) -> None:
        sent.append(fields.get("expect") or "")
        if fields.get("expect") == "conflicting_ref" and falls_due[0]:
            for copy in actor.delayed:
                copy.due = 0.0  # the round took longer than the copy's delay

    flows.create_order = lambda _: Order("o-1", "default", "k-1", {"amount_cents": 500})  # type: ignore[assignment]
    flows.send_webhook = send_webhook  # type: ignore[assignment]
    flows.concurrently = lambda calls, timeout: [call(sender) for sender, call in calls]  # type: ignore[assignment]
    rounds = []
    for second in (False, True):
        falls_due[0] = second
        sent.clear()
        flows.webhook_round(actor)  # type: ignore[arg-type]
        rounds.append({"sent": list(sent), "delayed_left": len(actor.delayed)})
    print(json.dumps(rounds))


if __name__ == "__main__":
    sys.exit(main())
