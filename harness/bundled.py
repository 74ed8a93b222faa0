"""The files the harness ships inside its package: one locustfile per scenario and the fault plans.

Both are read through `importlib.resources`, so a regular (non-editable) install, a
wheel and the Docker image find them exactly as a checkout does. A plan is named either
by its bundled name (`--plan chaos`) or by the path of a YAML file of one's own
(`--plan ./my-plan.yaml`); a value that is neither is a `HarnessError` listing the names.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from harness.errors import HarnessError

_PLAN_SUFFIXES = (".yaml", ".yml")


def _bundled_dir(name: str) -> Path:
    # Locust and the YAML loader need a real file: the package is installed unzipped
    # (setuptools' default), so the traversable is a filesystem path.
    folder = resources.files("harness") / name
    if not isinstance(folder, Path):
        raise HarnessError(f"the harness package is not installed as files: cannot read its {name}/")
    return folder


def locustfiles_dir() -> Path:
    return _bundled_dir("locustfiles")


def locustfile(scenario: str) -> Path:
    """The bundled locustfile of `scenario` (checked by the caller against the catalog)."""
    path = locustfiles_dir() / f"{scenario}.py"
    if not path.is_file():
        raise HarnessError(f"no locustfile for scenario {scenario!r} at {path}")
    return path


def plans_dir() -> Path:
    return _bundled_dir("plans")


def bundled_plan_names(directory: Path | None = None) -> list[str]:
    """The names `plan_path` finds: the `NAME.yaml` files of the bundled plans, or of
    another folder of plans (the web UI's `--chaos-plans-dir`)."""
    folder = plans_dir() if directory is None else directory
    return sorted(path.stem for path in folder.glob("*.yaml")) if folder.is_dir() else []


def plan_path(name_or_path: str | Path) -> Path:
    """A bundled plan's file (`chaos`), or the given YAML file when it exists."""
    text = str(name_or_path)
    given = Path(text).expanduser()
    if given.suffix in _PLAN_SUFFIXES or "/" in text or given.is_file():
        if given.is_file():
            return given
        bundled_copy = plans_dir() / given.name
        if given.parent.name == "plans" and bundled_copy.is_file():
            # `plans/chaos.yaml` as written before the plans moved into the package.
            return bundled_copy
        raise HarnessError(f"no plan file {text}: name a bundled plan ({', '.join(bundled_plan_names())}) "
                           "or an existing YAML file")
    bundled = plans_dir() / f"{text}.yaml"
    if not bundled.is_file():
        raise HarnessError(f"no bundled plan {text!r}: choose one of {', '.join(bundled_plan_names())} "
                           "or give the path of a YAML file")
    return bundled
