"""`dependencies.NAME.protocol` (harness.probe.config): redis or postgres, beside an
address or a started dependency's `command:`; kept through config.json; anything
else one line naming the field. The plain `NAME: host:port` form is unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from harness.probe.config import ProbeConfigError, parse_config

ENDPOINTS = [{"name": "pay", "path": "/pay", "id": {"pointer": "/id"}, "body": {"ref": "{uuid}"}}]
SERVICE = {"command": ["app", "--port", "{port}", "--db", "{dependency.db}"]}


def config(dependencies: Any) -> Any:
    return parse_config({"endpoints": ENDPOINTS, "service": SERVICE, "dependencies": dependencies}, source="p.yaml")


def test_a_protocol_beside_an_address_or_a_command_and_read_back() -> None:
    parsed = config({"db": {"address": "127.0.0.1:5432", "protocol": "postgres"},
                     "cache": {"address": "127.0.0.1:6390", "protocol": "redis",
                               "command": ["redis-server", "--port", "6390"]},
                     "queue": "127.0.0.1:5672"})
    assert parsed.dependencies == {"db": "127.0.0.1:5432", "cache": "127.0.0.1:6390", "queue": "127.0.0.1:5672"}
    assert parsed.dependency_protocols == {"db": "postgres", "cache": "redis"}
    assert set(parsed.dependency_processes) == {"cache"}
    again = parse_config(parsed.to_dict(), source="config.json")
    assert again.dependency_protocols == parsed.dependency_protocols
    assert again.to_dict()["dependencies"]["queue"] == "127.0.0.1:5672"


@pytest.mark.parametrize(("entry", "words"), [
    ({"address": "127.0.0.1:5432", "protocol": "mysql"},
     "p.yaml: dependencies.db.protocol: must be one of redis, postgres"),
    ({"address": "127.0.0.1:5432", "protocol": "postgres", "colour": 1},
     "p.yaml: dependencies.db: unknown key(s) colour"),
    ({"protocol": "postgres"}, "p.yaml: dependencies.db: as a mapping, give `address:`"),
])
def test_a_bad_protocol_entry_is_one_line_naming_the_field(entry: dict[str, Any], words: str) -> None:
    with pytest.raises(ProbeConfigError) as error:
        config({"db": entry})
    assert str(error.value).startswith(words) and "\n" not in str(error.value)
