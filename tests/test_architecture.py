"""The house's rules (docs/architecture.md), read from the source: arrows point one way.

Imports are collected with `ast` from every module of `harness/`, at module level,
inside functions and under `if TYPE_CHECKING:` alike (a lazy import is still a
dependency, and so is a type-only one: two modules that name each other's types are
one concept split in two, even if the interpreter never runs the import). Three rules:
- no import circle between modules, and none between packages;
- the leaves (the shared top-level modules) import only other leaves;
- what observes the app (load, check, report, nemesis, probe) never imports it, and
  the app never imports the harness (the CLI may read the app's settings parser to
  check a `TARGET_APP_*` variable before a run; the stack only starts the app).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEAVES = frozenset({"errors", "exit_codes", "names", "history", "catalog", "durations", "fieldcheck",
                    "ports", "bundled", "process_handle", "generators", "documents"})


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_files(package: str, root: Path = ROOT) -> list[Path]:
    return sorted((root / package).rglob("*.py"))


def imported_names(path: Path) -> set[str]:
    """Every dotted name an import in `path` may refer to, `if TYPE_CHECKING:` imports
    included: `from a.b import c` gives both `a.b` and `a.b.c` (the caller keeps those
    that are modules; `harness_graph` keeps only `a.b.c` when that is a submodule, since
    then `a.b` is just the way there)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def harness_graph(root: Path = ROOT, package: str = "harness") -> dict[str, set[str]]:
    """module -> the modules of `package` (under `root`) it imports."""
    # The locustfiles are scripts Locust runs, never imported: not part of the graph.
    modules = {module_name(path, root): path for path in python_files(package, root)
               if "locustfiles" not in path.parts}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {target for target in imported_names(path) if target in modules and target != name}
        via = {target.rpartition(".")[0] for target in targets}  # packages named only on the way to a submodule
        graph[name] = {target for target in targets
                       if target not in via or not root.joinpath(*target.split(".")).is_dir()
                       or _imports_package_itself(path, target, root)}
    return graph


def _imports_package_itself(path: Path, package: str, root: Path = ROOT) -> bool:
    """`from package import name` where some name is not a submodule: the package's own code runs."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == package and node.level == 0:
            folder = root.joinpath(*package.split("."))
            if any(not (folder / f"{alias.name}.py").exists() and not (folder / alias.name).is_dir()
                   for alias in node.names):
                return True
    return False


def part_of(module: str) -> str:
    """`harness.check.checker` -> `check`; a top-level module is its own part."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "harness"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_a_type_only_import_closes_a_circle(tmp_path: Path) -> None:
    """A cycle whose one arrow is an `if TYPE_CHECKING:` import is still a cycle."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "records.py").write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.rules import Rule\n"
        "def first(rules: list[Rule]) -> Rule:\n"
        "    return rules[0]\n")
    (package / "rules.py").write_text("from pkg.records import first\nclass Rule: ...\n")
    graph = harness_graph(tmp_path, "pkg")
    assert graph["pkg.records"] == {"pkg.rules"} and graph["pkg.rules"] == {"pkg.records"}
    assert find_cycle(graph) == ["pkg.records", "pkg.rules", "pkg.records"]
    (package / "records.py").write_text("def first(rules: list[object]) -> object:\n    return rules[0]\n")
    assert find_cycle(harness_graph(tmp_path, "pkg")) is None


def test_no_import_circle_between_modules() -> None:
    graph = harness_graph()
    assert len(graph) > 50
    cycle = find_cycle(graph)
    assert cycle is None, "modules import each other: " + " -> ".join(cycle or [])


def test_no_import_circle_between_packages() -> None:
    packages: dict[str, set[str]] = {}
    for module, targets in harness_graph().items():
        if module == "harness":
            continue
        packages.setdefault(part_of(module), set()).update(
            part_of(target) for target in targets if part_of(target) not in {part_of(module), "harness"})
    assert {"stack", "nemesis", "load", "check", "report", "run", "cli"} <= set(packages)
    cycle = find_cycle(packages)
    assert cycle is None, "packages import each other: " + " -> ".join(cycle or [])


def test_the_leaves_import_only_leaves() -> None:
    for module, targets in harness_graph().items():
        if part_of(module) in LEAVES:
            outside = {target for target in targets if part_of(target) not in LEAVES | {"harness"}}
            assert not outside, f"{module} is a leaf but imports {sorted(outside)}"


@pytest.mark.parametrize(("package", "forbidden"), [
    # The observers: what judges the app must not share its code (a signing or
    # fingerprint bug would be mirrored on both sides and never seen).
    ("harness/load", "target_app"), ("harness/check", "target_app"), ("harness/report", "target_app"),
    ("harness/nemesis", "target_app"), ("harness/probe", "target_app"), ("harness/locustfiles", "target_app"),
    # The webhook schemes and deliveries are shared by the probe and the payment provider,
    # which both import them: they import neither (nor the app they sign for).
    ("harness/webhooks", "target_app"), ("harness/webhooks", "harness.probe"),
    ("harness/webhooks", "harness.provider"),
    # The payment provider is a server of its own, usable without the probe: it builds on
    # harness.webhooks and the leaves, never on the probe or the app it charges for.
    ("harness/provider", "harness.probe"), ("harness/provider", "target_app"),
    # The system under test knows nothing of what tests it.
    ("target_app", "harness"),
])
def test_the_observers_and_the_app_never_import_each_other(package: str, forbidden: str) -> None:
    offenders = [str(path.relative_to(ROOT)) for path in python_files(package)
                 if any(name == forbidden or name.startswith(forbidden + ".") for name in imported_names(path))]
    assert offenders == []
