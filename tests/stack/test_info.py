"""StackInfo: state.json read and written as one checked value.

A round trip gives back the very JSON (both modes), every documented key is an
attribute, and a broken or foreign file is one StackError naming the file and the
field, from `read_info`, `open_stack` and `harness status` alike.
"""

from __future__ import annotations

import json
import re
from dataclasses import fields, replace
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.stack.info import STATE_FILE, ServiceInfo, StackError, StackInfo, read_info, write_info
from harness.stack.local import open_stack
from tests.support.stacks import sample_info

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mode", ["local", "compose"])
def test_round_trip_gives_back_the_same_json(tmp_path: Path, mode: str) -> None:
    info = sample_info(mode=mode, unsafe_disable=("api", "domain"))
    write_info(tmp_path, info)
    raw = json.loads((tmp_path / STATE_FILE).read_text())
    assert raw == info.to_json()
    assert read_info(tmp_path) == info
    assert StackInfo.from_json(raw).to_json() == raw
    # The keys of the other mode are absent, not null: the file's format as it always was.
    absent = {"compose_file", "project", "health_timeout"} if mode == "local" else {"supervisor_pid",
                                                                                     "control_socket"}
    assert not absent & set(raw)
    assert raw["unsafe_disable"] == ["api", "domain"] and isinstance(raw["services"], list)


def test_a_compose_service_without_status_keeps_none() -> None:
    row = {"name": "redis", "pid": None, "port": 6379, "log": None}
    service = ServiceInfo.from_json(row, "x", "services[0]")
    assert service.status is None and service.to_json() == row


def test_every_documented_key_is_an_attribute() -> None:
    text = (REPO / "docs" / "internals.md").read_text()
    section = text.split("## Stack state", 1)[1]
    example = section.split("```json", 1)[1].split("```", 1)[0]
    document = json.loads(example)
    compose_only = {"compose_file", "project", "health_timeout"}
    assert set(document) == {spec.name for spec in fields(StackInfo)} - compose_only
    assert set(document["services"][0]) == {spec.name for spec in fields(ServiceInfo)}
    attributes = {spec.name for spec in fields(StackInfo)}
    compose_keys = set(re.findall(r"`([a-z_]+)`", section.split("compose stack has", 1)[1].split("\n\n")[0]))
    assert {"compose_file", "project", "health_timeout"} <= compose_keys <= attributes | {"mode", "compose"}


@pytest.mark.parametrize(("change", "field", "wanted"), [
    (lambda d: d.pop("owner"), "owner", "missing"),
    (lambda d: d.update(app_workers="4"), "app_workers", "an integer"),
    (lambda d: d.update(supervisor_pid=True), "supervisor_pid", "an integer"),
    (lambda d: d.update(mode="swarm"), "mode", "one of local, compose"),
    (lambda d: d.update(unsafe_disable="api"), "unsafe_disable", "a list of strings"),
    (lambda d: d.update(proxies=["app"]), "proxies", "an object of strings"),
    (lambda d: d["services"][0].update(port="x"), "services[0].port", "an integer or null"),
    (lambda d: d.update(services=[1]), "services[0]", "not a JSON object"),
])
def test_a_broken_state_file_names_the_file_and_the_field(tmp_path: Path, change, field: str, wanted: str) -> None:
    data = sample_info().to_json()
    change(data)
    (tmp_path / STATE_FILE).write_text(json.dumps(data))
    with pytest.raises(StackError) as caught:
        read_info(tmp_path)
    message = str(caught.value)
    assert message.startswith(str(tmp_path / STATE_FILE)) and field in message and wanted in message
    assert "\n" not in message


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"hello": "world"}'])
def test_a_foreign_state_file_is_a_clear_error_everywhere(tmp_path: Path, content: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / STATE_FILE).write_text(content)
    with pytest.raises(StackError, match=re.escape(str(tmp_path / STATE_FILE))):
        open_stack(tmp_path)
    assert main(["status", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / STATE_FILE) in err


def test_no_state_file_is_no_stack(tmp_path: Path) -> None:
    assert read_info(tmp_path) is None and open_stack(tmp_path) is None


def test_service_lookup_names_the_known_ones() -> None:
    info = sample_info()
    assert info.service("redis").port == 2222 and info.service_names == ("redis", "consumer-1")
    with pytest.raises(StackError, match="unknown service 'app'; this stack has redis, consumer-1"):
        info.service("app")
    assert replace(info, phase="stopping").to_json()["phase"] == "stopping"
