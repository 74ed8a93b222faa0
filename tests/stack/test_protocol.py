"""Both stack handles implement the `Stack` protocol, checked by mypy itself, and the
stack modules import each other in one direction only (no circle)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from mypy import api

from harness.stack.compose import ComposeStack
from harness.stack.local import RunningStack
from harness.stack.protocol import ServiceActions, Stack

STACK_DIR = Path(__file__).resolve().parents[2] / "harness" / "stack"

SNIPPET = """
from harness.stack.compose import ComposeStack
from harness.stack.local import RunningStack
from harness.stack.protocol import Stack

def both(local: RunningStack, compose: ComposeStack) -> list[Stack]:
    return [local, compose]

class HalfAStack:
    def kill(self, service: str) -> None: ...

def half(stack: HalfAStack) -> Stack:
    return stack
"""


def test_mypy_accepts_both_handles_as_a_stack_and_refuses_half_of_one(tmp_path: Path) -> None:
    source = tmp_path / "stacks_are_stacks.py"
    source.write_text(SNIPPET)
    out, err, status = api.run(["--strict", "--follow-imports=silent", "--no-error-summary",
                                f"--cache-dir={tmp_path / 'cache'}", str(source)])
    errors = [line for line in out.splitlines() if ": error:" in line]
    # The one error is the half stack (the last line of the snippet): the two real handles pass.
    assert len(errors) == 1, out + err
    assert f"{source}:{len(SNIPPET.splitlines())}:" in errors[0] and "HalfAStack" in errors[0]


def _members(protocol: type) -> set[str]:
    return {name for klass in protocol.__mro__ if klass not in (object,) and klass.__name__ != "Protocol"
            for name in vars(klass) if not name.startswith("_") or name in ("__enter__", "__exit__")}


@pytest.mark.parametrize("handle", [RunningStack, ComposeStack])
def test_every_protocol_method_takes_the_same_arguments(handle: type) -> None:
    members = _members(Stack)
    assert {"info", "root", "nemesis", "down", "health", "services"} <= members
    assert set(_members(ServiceActions)) <= members
    for name in members - {"root"}:  # root is a plain attribute of both handles
        wanted = getattr(Stack, name)
        found = getattr(handle, name)
        if isinstance(wanted, property):
            assert isinstance(found, property), f"{handle.__name__}.{name} is not a property"
            continue
        wanted_params = list(inspect.signature(wanted).parameters)
        found_params = list(inspect.signature(found).parameters)
        assert found_params[:len(wanted_params)] == wanted_params, (handle.__name__, name)


def _stack_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness.stack"):
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_compose_does_not_import_the_local_stack() -> None:
    assert not any(name.startswith("harness.stack.local") for name in _stack_imports(STACK_DIR / "compose.py"))
    for module in ("info.py", "settings.py", "protocol.py", "control.py"):
        imports = _stack_imports(STACK_DIR / module)
        assert not any(name.startswith(("harness.stack.local", "harness.stack.compose")) for name in imports), module
    # The registry asks a supervisor through the control client, not through the stack
    # handle (which imports the registry): no import of the handle, not even a lazy one.
    registry_imports = _stack_imports(STACK_DIR / "registry.py")
    assert "harness.stack.control" in registry_imports
    assert not any(name.startswith(("harness.stack.local", "harness.stack.compose")) for name in registry_imports)
