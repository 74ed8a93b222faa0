"""One recorded operation for every channel: `recorded_operation` writes the invoke,
exactly one completion (`info` whenever the call raised) and one Locust request
entry, and the stream publisher goes through it like the HTTP channel.

Locust monkey-patches the process that imports it, so the calls run in a
subprocess that prints what Locust's request event received; the history is read
back here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.history import history_files, iter_operations, iter_records

REPO = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import json, sys
from pathlib import Path

from locust.event import Events

from harness.history import Client, HistoryWriter
from harness.load.recording import Completion, recorded_operation
from harness.load.stream import publish


class Connection:
    """A Redis stand-in: the first XADD answers, the second breaks mid-command."""

    def __init__(self):
        self.sent = []

    def xadd(self, stream, fields):
        self.sent.append((stream, fields))
        if len(self.sent) > 1:
            raise ConnectionError("reset by peer")
        return b"1-0"


events = Events()
reported = []
events.request.add_listener(lambda **kw: reported.append(
    {"type": kw["request_type"], "name": kw["name"], "length": kw["response_length"],
     "failure": None if kw["exception"] is None else type(kw["exception"]).__name__}))
connection = Connection()
with HistoryWriter(Path(sys.argv[1]) / "w.jsonl") as writer:
    client = Client(writer, worker="w", user=1)
    first = publish(client, connection, "payments", events, message_id="m-1", order_id="o-1",
                    provider_ref="p-1", amount_cents=100)
    second = publish(client, connection, "payments", events, message_id="m-1", order_id="o-1",
                     provider_ref="p-1", amount_cents=100, expect="producer_duplicate")
    refused = recorded_operation(
        client, events, lambda: Completion("fail", "no", {"status": 404}, 7, None),
        op="read_order", request_type="GET", name="read_order", tenant="tenant-a",
        fields={"order_id": "o-1"})
    process = client.process
print(json.dumps({"first": first, "second": second, "refused": [refused.kind, refused.value],
                  "process": process, "reported": reported, "sent": connection.sent}))
'''


def run(tmp_path: Path) -> dict[str, Any]:
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True,
                            cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    output: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return output


def test_publishing_is_one_recorded_operation_and_an_error_leaves_it_indeterminate(tmp_path: Path) -> None:
    output = run(tmp_path)
    assert (output["first"], output["second"]) == ("1-0", None)
    assert output["sent"][0] == ["payments", {"message_id": "m-1", "order_id": "o-1", "provider_ref": "p-1",
                                              "amount_cents": "100"}]
    operations = list(iter_operations(history_files(tmp_path)))
    assert [(o["op"], o["type"], o.get("expect")) for o in operations] == [
        ("publish", "ok", None), ("publish", "info", "producer_duplicate"), ("read_order", "fail", None)]
    lost = operations[1]
    assert lost["error"] == "ConnectionError: reset by peer" and lost["message_id"] == "m-1"
    # After the info the client went on as a new Jepsen process.
    assert [o["process"] for o in operations] == ["w-u1-p0", "w-u1-p0", "w-u1-p1"]
    assert operations[2]["tenant"] == "tenant-a" and operations[2]["status"] == 404
    # Every operation is one invoke and one completion in the file.
    kinds = [record["type"] for record in iter_records(tmp_path / "w.jsonl")]
    assert kinds == ["invoke", "ok", "invoke", "info", "invoke", "fail"]


def test_each_operation_is_one_entry_in_locusts_statistics(tmp_path: Path) -> None:
    output = run(tmp_path)
    assert output["refused"] == ["fail", "no"]
    assert output["reported"] == [
        {"type": "XADD", "name": "publish", "length": 0, "failure": None},
        {"type": "XADD", "name": "publish [producer_duplicate]", "length": 0, "failure": "ConnectionError"},
        {"type": "GET", "name": "read_order", "length": 7, "failure": None},
    ]
