"""`harness fault add --help` names Toxiproxy's unit for every toxic attribute: the API
takes whole numbers, and the same flag can mean two units (`--delay`: ms for
slow_close, µs for slicer)."""

from __future__ import annotations

import argparse

from harness.cli.main import build_parser
from harness.toxiproxy.toxics import TOXIC_ATTRIBUTES


def fault_add_parser() -> argparse.ArgumentParser:
    root = build_parser()
    fault = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction)).choices["fault"]
    commands = next(a for a in fault._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["add"]


def test_every_toxic_attribute_names_its_unit_for_each_toxic_that_takes_it() -> None:
    helps = {action.dest: action.help or "" for action in fault_add_parser()._actions}
    for toxic, attributes in TOXIC_ATTRIBUTES.items():
        for attribute in attributes:
            text = helps[f"attr_{attribute}"]
            assert any(f"{toxic}: {unit}" in text for unit in ("ms", "µs", "KB/s", "bytes")), (toxic, text)
    assert "slow_close: ms" in helps["attr_delay"] and "slicer: µs" in helps["attr_delay"]
